#include "tests/util/multiproc.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus::testing {

std::string RankExit::Describe() const {
  std::string s = "rank " + std::to_string(rank) + ": ";
  if (timed_out) return s + "timed out (killed)";
  if (exited) return s + "exit code " + std::to_string(code);
  return s + "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

std::vector<RankExit> RunRanks(int nranks, const std::function<int(int rank)>& body,
                               const MultiProcOptions& options) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nranks).c_str(), 1);
      for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      int code = body(r);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);  // skip atexit/gtest teardown in the child
    }
    pids[r] = pid;
  }
  std::vector<RankExit> exits(nranks);
  int remaining = nranks;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_seconds);
  while (remaining > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got != pids[r]) continue;
      exits[r].rank = r;
      exits[r].exited = WIFEXITED(status);
      exits[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      exits[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pids[r] = -1;
      --remaining;
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] < 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        exits[r].rank = r;
        exits[r].timed_out = true;
        pids[r] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exits;
}

std::string UniqueRendezvousFile() {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string base = dir != nullptr ? dir : "/tmp";
  return base + "/chorus_rdv_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

void ExpectAllOk(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

}  // namespace chorus::testing
