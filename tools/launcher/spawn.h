// Starting one rank: its environment, its own process group, pipes for its output.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "tools/launcher/options.h"

namespace chorus::launcher {

// The inherited environment `inherited` (NULL-terminated, like environ) with the
// launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) set for this rank.
std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank, int local_rank, char* const* inherited);

struct SpawnedRank {
  pid_t pid = -1;   // also its process group id
  int out_fd = -1;  // non-blocking read ends of its stdout / stderr pipes
  int err_fd = -1;
};

// Forks and execs o.program for `rank`. The child leads a new process group, gets
// /dev/null as stdin, default signal dispositions and PR_SET_PDEATHSIG(SIGKILL). If
// exec fails, the child says why on its stderr and exits 127.
// The caller must be single-threaded and may block signals: the child unblocks them.
Result<SpawnedRank> SpawnRank(const LaunchOptions& o, int rank, int local_rank);

// mkdir -p.
Status MakeDirs(const std::string& path);

}  // namespace chorus::launcher
