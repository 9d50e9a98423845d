// Runs N ranks as N forked processes of the test binary, each calling `body(rank)`
// and exiting with its return value; bounded by a timeout after which every rank
// still running is killed. Real processes, real sockets: this is how chorus runs.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace chorus::testing {

struct RankExit {
  int rank = -1;
  bool exited = false;  // exited normally (else killed by a signal)
  int code = -1;        // exit code when exited
  int signal = 0;       // terminating signal otherwise
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

// Expects every rank to have exited normally with code 0 (a GoogleTest check per rank).
void ExpectAllOk(const std::vector<RankExit>& exits);

// A fresh path for a file:// rendezvous (unique per call, under TEST_TMPDIR or /tmp).
std::string UniqueRendezvousFile();
// A TCP port that was free a moment ago (bind to port 0, read it, close).
int FreePort();

}  // namespace chorus::testing

// Checks inside a forked rank: print what failed and return 1 (the rank's exit code).
#define RANK_CHECK(cond, msg)                                                               \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "rank check failed: %s: %s\n", #cond, std::string(msg).c_str()); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)
#define RANK_OK(expr)                     \
  do {                                    \
    ::chorus::Status _st = (expr);        \
    RANK_CHECK(_st.ok(), _st.ToString()); \
  } while (0)
