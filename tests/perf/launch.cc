#include "tests/perf/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace chorus {
namespace perf {
namespace testing {

std::vector<ProcResult> RunAll(const std::vector<std::vector<std::string>>& commands,
                               const std::vector<std::map<std::string, std::string>>& envs,
                               std::chrono::seconds timeout) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (size_t i = 0; i < commands.size(); ++i) {
    logs.push_back(dir + "/proc_" + std::to_string(::getpid()) + "_" + std::to_string(i) + ".log");
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Own process group so that a timeout kills launcher children (mpirun's ranks) too.
      ::setpgid(0, 0);
      const int fd = ::open(logs[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& kv : envs[i]) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : commands[i]) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<ProcResult> results(commands.size());
  std::vector<bool> done(commands.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t left = commands.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(-pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        results[i].timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < logs.size(); ++i) {
    std::ifstream f(logs[i]);
    std::stringstream ss;
    ss << f.rdbuf();
    results[i].output = ss.str();
  }
  return results;
}

std::vector<ProcResult> RunPerfRanks(const std::string& backend, const std::vector<std::string>& args, int nranks,
                                     const EnvMap& env, std::chrono::seconds timeout, EnvMap (*rank_env)(int rank)) {
  const int port = FreePort();
  std::vector<std::vector<std::string>> cmds;
  std::vector<EnvMap> envs;
  for (int rank = 0; rank < nranks; ++rank) {
    std::vector<std::string> cmd = {ChorusPerfPath(), "--backend", backend, "--timeout", "30"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    cmds.push_back(cmd);
    EnvMap e = {{"RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(nranks)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)}};
    for (const auto& kv : env) e[kv.first] = kv.second;
    if (rank_env != nullptr) {
      for (const auto& kv : rank_env(rank)) e[kv.first] = kv.second;
    }
    envs.push_back(e);
  }
  return RunAll(cmds, envs, timeout);
}

std::string ChorusPerfPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string candidate = std::string(srcdir ? srcdir : ".") + "/chorus/tools/perf/chorus_perf";
  if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  return "tools/perf/chorus_perf";  // the runfiles tree is the working directory
}

std::vector<std::vector<std::string>> DataRows(const std::string& output) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find_first_not_of(' ') == std::string::npos) continue;
    if (line.find("chorus_perf:") != std::string::npos || line[0] == '[') continue;  // errors, logs
    std::istringstream fields(line);
    std::vector<std::string> row;
    std::string f;
    while (fields >> f) row.push_back(f);
    // A data row starts with its size; anything else is a library's chatter.
    if (row.empty() || row[0].find_first_not_of("0123456789") != std::string::npos) continue;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace testing
}  // namespace perf
}  // namespace chorus
