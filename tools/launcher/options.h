// Command line of chorusrun, the torchrun-like launcher. Parsing is separate from
// launching so that every bad flag/value is unit-testable.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // 0 = not given: a free ephemeral port when nnodes == 1 (parallel single-node
  // runs must not collide), 29500 otherwise (every node must agree without talking).
  int master_port = 0;
  double timeout_s = 0;              // 0 = no timeout
  double kill_grace_s = 5;           // SIGTERM -> SIGKILL delay when stopping ranks
  std::string tee_dir;               // when set, raw rank output is also written here
  std::vector<std::string> program;  // program and its arguments
  // CHORUS_SECRET for the ranks: made by chorusrun on a single node when neither
  // CHORUS_SECRET nor CHORUS_SECRET_FILE is set (never printed).
  std::string job_secret;
  bool help = false;
};

constexpr int kDefaultMultiNodePort = 29500;

// Parses argv[1..]. Errors name the flag and the bad value.
Result<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args);
std::string UsageText();

}  // namespace chorus::launcher
