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
#include <random>
#include <thread>

namespace chorus::testing {

std::string RankExit::Describe() const {
  std::string s = "rank " + std::to_string(rank) + ": ";
  if (timed_out) return s + "timed out (killed)";
  if (exited) return s + "exit code " + std::to_string(code);
  return s + "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

std::vector<RankExit> RunRanks(int nranks, const std::function<int(int rank)>& body, const MultiProcOptions& options) {
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

namespace {
bool Bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);  // the store binds every interface
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}
}  // namespace

int FreePort() {
  // Below Linux's ephemeral range (32768+): a port the kernel hands to some other
  // test's connect() or bind(0) between our check and the store's bind would make
  // the store fail with "already in use". Random, so parallel tests rarely collide.
  static std::atomic<uint64_t> salt{0};
  std::mt19937 rng(static_cast<uint32_t>(getpid() * 2654435761u + (salt++) * 40503u +
                                         std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + static_cast<int>(rng() % 10000);
    if (Bindable(port)) return port;
  }
  return 29500;  // practically unreachable; the test then fails naming the port
}

void ExpectAllOk(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

}  // namespace chorus::testing
