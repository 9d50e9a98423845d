// Runs N ranks as N forked processes of the test binary, each calling `body(rank)`
// and exiting with its return value; bounded by a timeout after which every rank
// still running is killed. Real processes, real sockets: this is how chorus runs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace chorus::testing {

struct RankExit {
  int rank = -1;
  bool exited = false;   // exited normally (else killed by a signal)
  int code = -1;         // exit code when exited
  int signal = 0;        // terminating signal otherwise
  bool timed_out = false;
  std::string Describe() const;
};

struct MultiProcOptions {
  int timeout_seconds = 60;
  // Environment set in every rank before body runs (RANK and WORLD_SIZE are added).
  std::map<std::string, std::string> env;
};

std::vector<RankExit> RunRanks(int nranks, const std::function<int(int rank)>& body,
                               const MultiProcOptions& options = MultiProcOptions());

// A fresh path for a file:// rendezvous (unique per call, under TEST_TMPDIR or /tmp).
std::string UniqueRendezvousFile();
// A TCP port that was free a moment ago (bind to port 0, read it, close).
int FreePort();

}  // namespace chorus::testing
