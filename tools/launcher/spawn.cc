#include "tools/launcher/spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

extern char** environ;

namespace chorus::launcher {

std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank, int local_rank, char* const* inherited) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"CHORUS_LAUNCHER", "chorusrun"},
  };
  if (!o.job_secret.empty()) ours.emplace_back("CHORUS_SECRET", o.job_secret);
  std::vector<std::string> env;
  for (char* const* e = inherited; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool replaced = std::any_of(ours.begin(), ours.end(), [&](auto& p) { return p.first == key; });
    if (!replaced) env.push_back(kv);
  }
  for (auto& [k, v] : ours) env.push_back(k + "=" + v);
  return env;
}

Result<SpawnedRank> SpawnRank(const LaunchOptions& o, int rank, int local_rank) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return IoError("pipe", errno);
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]), close(out[1]);
    return IoError("pipe", e);
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env = RankEnvironment(o, rank, local_rank, environ);
  std::vector<std::string> program = o.program;
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : program) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string exec_error = "chorusrun: cannot run '" + o.program[0] + "': ";
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return IoError("fork", e);
  }
  if (pid == 0) {
    setpgid(0, 0);                     // own group: a stop signal reaches the rank's children too
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // chorusrun killed by SIGKILL: take the rank down
    if (getppid() != parent) _exit(127);
    int devnull = open("/dev/null", O_RDONLY);  // ranks are not in the terminal's group
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    // Blocked signals and ignored dispositions survive exec (a shell's `cmd &` ignores
    // SIGINT): give the rank defaults so that forwarded signals act. SIGHUP is left
    // alone: under nohup it is meant to stay ignored.
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT}) signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!write(STDERR_FILENO, exec_error.data(), exec_error.size());
    const char* why = strerror(e);  // not async-signal-safe in theory; the parent is single-threaded
    (void)!write(STDERR_FILENO, why, strlen(why));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before the caller may signal it
  close(out[1]);
  close(err[1]);
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return SpawnedRank{pid, out[0], err[0]};
}

Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return IoError("mkdir " + prefix, errno);
  }
  return Status::Ok();
}

}  // namespace chorus::launcher
