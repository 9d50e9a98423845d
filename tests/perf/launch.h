// Test helper: starts chorus_perf ranks as child processes with their own environment,
// collects their output and kills them all if they outlive a deadline, so an
// integration test can never hang.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/util/multiproc.h"

namespace chorus {
namespace perf {
namespace testing {

struct ProcResult {
  int exit_code = -1;  // -1: killed at the deadline or by a signal
  bool timed_out = false;
  std::string output;  // stdout and stderr
};

// Runs each command (argv) concurrently with `env` added to this process's environment;
// waits at most `timeout` for all of them.
std::vector<ProcResult> RunAll(const std::vector<std::vector<std::string>>& commands,
                               const std::vector<std::map<std::string, std::string>>& envs,
                               std::chrono::seconds timeout);

// The chorus_perf binary in the test's runfiles.
std::string ChorusPerfPath();

// `nranks` chorus_perf ranks of `backend` on loopback with torchrun's variables (RANK,
// WORLD_SIZE, MASTER_ADDR=127.0.0.1, a fresh MASTER_PORT), each run as
// `chorus_perf --backend B --timeout 30 ARGS...` with `env` and then `rank_env(rank)`
// added, bounded by `timeout`.
using EnvMap = std::map<std::string, std::string>;
std::vector<ProcResult> RunPerfRanks(const std::string& backend, const std::vector<std::string>& args, int nranks,
                                     const EnvMap& env, std::chrono::seconds timeout,
                                     EnvMap (*rank_env)(int rank) = nullptr);
// A TCP port that was free a moment ago (the one picker every test shares).
using chorus::testing::FreePort;
// Lines of a chorus_perf table (not starting with '#'), split on whitespace.
std::vector<std::vector<std::string>> DataRows(const std::string& output);

}  // namespace testing
}  // namespace perf
}  // namespace chorus
