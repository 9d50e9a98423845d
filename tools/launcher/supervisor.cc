#include "tools/launcher/supervisor.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "common/deadline.h"
#include "common/log.h"
#include "tools/launcher/line_prefixer.h"
#include "tools/launcher/spawn.h"

namespace chorus::launcher {
namespace {

// After the last rank exits, output still buffered in pipes (or held open by a
// process that escaped the rank's process group) is read for at most this long.
constexpr int kDrainMs = 2000;
// After SIGKILL, how long to wait for a process stuck in the kernel before giving up.
constexpr int kGiveUpAfterKillMs = 5000;

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stdout closed (EPIPE): output is lost, supervision goes on
    off += static_cast<size_t>(n);
  }
}

void Say(const std::string& line) { WriteAll(STDERR_FILENO, "chorusrun: " + line + "\n"); }

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

struct Stream {
  Stream(int out, std::string prefix) : out_fd(out), prefixer(std::move(prefix)) {}
  int fd = -1;      // read end of the rank's pipe; -1 once at EOF
  int out_fd;       // where prefixed lines go: 1 or 2
  int tee_fd = -1;  // raw copy under --tee-dir
  LinePrefixer prefixer;
};

struct Rank {
  Rank(int r, int local) : rank(r), local_rank(local), out(1, Prefix(r)), err(2, Prefix(r)) {}
  static std::string Prefix(int r) { return "[rank " + std::to_string(r) + "] "; }
  int rank;
  int local_rank;
  pid_t pid = -1;  // also the process group id: each rank leads its own group
  bool running = false;
  bool signalled_by_us = false;
  Stream out, err;
};

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& o) : o_(o) {}
  int Run();

 private:
  enum class Phase { kRunning, kStopping };
  Status Setup();
  Status Spawn(Rank& r);
  void Pump(Stream& s);
  void CloseStream(Stream& s);
  void Reap();
  void OnRankExit(Rank& r, int status);
  void BeginStop(int sig);
  void SignalRunning(int sig);
  void HandleSignals();
  void CheckDeadlines();
  int RunningCount() const;
  void ReapOrphans();

  const LaunchOptions& o_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int sigfd_ = -1;
  Phase phase_ = Phase::kRunning;
  std::optional<int> exit_code_;  // decided by the first failure, timeout or signal
  std::optional<Deadline> timeout_at_, kill_at_, give_up_at_, drain_until_;
  bool gave_up_ = false;
};

Status Supervisor::Setup() {
  // Orphaned grandchildren are re-parented to us, so we can reap them: no zombies.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) CHORUS_INFO("chorusrun: PR_SET_CHILD_SUBREAPER failed");
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return IoError("sigprocmask", errno);
  sigfd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd_ < 0) return IoError("signalfd", errno);
  if (!o_.tee_dir.empty()) CHORUS_RETURN_IF_ERROR(MakeDirs(o_.tee_dir).WithContext("--tee-dir"));
  return Status::Ok();
}

Status Supervisor::Spawn(Rank& r) {
  if (!o_.tee_dir.empty()) {
    for (Stream* s : {&r.out, &r.err}) {
      std::string path = o_.tee_dir + "/rank_" + std::to_string(r.rank) + (s == &r.out ? ".stdout" : ".stderr");
      s->tee_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (s->tee_fd < 0) return IoError("--tee-dir: open " + path, errno);
    }
  }
  Result<SpawnedRank> spawned = SpawnRank(o_, r.rank, r.local_rank);
  if (!spawned.ok()) return spawned.status();
  r.pid = spawned->pid;
  r.out.fd = spawned->out_fd;
  r.err.fd = spawned->err_fd;
  r.running = true;
  CHORUS_INFO("chorusrun: started rank " << r.rank << " pid " << r.pid);
  return Status::Ok();
}

void Supervisor::Pump(Stream& s) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      CloseStream(s);
      return;
    }
    if (s.tee_fd >= 0) WriteAll(s.tee_fd, std::string(buf, static_cast<size_t>(n)));
    WriteAll(s.out_fd, s.prefixer.Feed(buf, static_cast<size_t>(n)));
    if (n < static_cast<ssize_t>(sizeof(buf))) return;  // let other ranks have a turn
  }
}

void Supervisor::CloseStream(Stream& s) {
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
  WriteAll(s.out_fd, s.prefixer.Flush());  // a partial last line still gets its prefix
  if (s.tee_fd >= 0) close(s.tee_fd);
  s.tee_fd = -1;
}

int Supervisor::RunningCount() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](auto& r) { return r->running; }));
}

void Supervisor::Reap() {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    siginfo_t si{};
    // WNOWAIT keeps the rank a zombie, so its process group id cannot be reused
    // while we kill what is left in the group (children it left behind).
    if (waitid(P_PID, r->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != r->pid) continue;
    killpg(r->pid, SIGKILL);
    int status = 0;
    if (waitpid(r->pid, &status, 0) == r->pid) OnRankExit(*r, status);
  }
  // Orphans handed to us as subreaper (rank children that outlived the rank).
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (auto& r : ranks_) {
      if (r->running && r->pid == pid) OnRankExit(*r, status);
    }
  }
}

void Supervisor::OnRankExit(Rank& r, int status) {
  r.running = false;
  Pump(r.out);  // its last words come before the verdict
  Pump(r.err);
  if (RunningCount() == 0) drain_until_ = Deadline::AfterMs(kDrainMs);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    CHORUS_INFO("chorusrun: rank " << r.rank << " exited with code 0");
    return;
  }
  std::string what = WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                       : "killed by signal " + SignalName(WTERMSIG(status));
  Say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " + what +
      (r.signalled_by_us ? " (stopped by chorusrun)" : ""));
  if (phase_ == Phase::kRunning) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (RunningCount() > 0) {
      Say("stopping the other ranks (SIGTERM, then SIGKILL after " + Seconds(o_.kill_grace_s) + ")");
    }
    BeginStop(SIGTERM);
  }
}

void Supervisor::SignalRunning(int sig) {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    r->signalled_by_us = true;
    killpg(r->pid, sig);
  }
}

void Supervisor::BeginStop(int sig) {
  phase_ = Phase::kStopping;
  SignalRunning(sig);
  kill_at_ = Deadline::AfterMs(static_cast<int64_t>(o_.kill_grace_s * 1000));
}

void Supervisor::HandleSignals() {
  signalfd_siginfo info;
  while (read(sigfd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // Reap() runs every iteration
    if (phase_ == Phase::kRunning) {
      Say("received " + SignalName(sig) + ", forwarding it to the ranks");
      if (!exit_code_) exit_code_ = 128 + sig;
      BeginStop(sig);
    } else {
      Say("received " + SignalName(sig) + " again, killing the ranks");
      SignalRunning(SIGKILL);
      if (!give_up_at_) give_up_at_ = Deadline::AfterMs(kGiveUpAfterKillMs);
    }
  }
}

void Supervisor::CheckDeadlines() {
  if (phase_ == Phase::kRunning && timeout_at_ && timeout_at_->expired() && RunningCount() > 0) {
    std::string still;
    for (auto& r : ranks_) {
      if (r->running) still += " " + std::to_string(r->rank) + " (pid " + std::to_string(r->pid) + ")";
    }
    Say("timeout after " + Seconds(o_.timeout_s) + "; ranks still running:" + still);
    exit_code_ = 124;
    BeginStop(SIGTERM);
  }
  if (kill_at_ && kill_at_->expired() && !give_up_at_ && RunningCount() > 0) {
    Say("grace period over, sending SIGKILL to " + std::to_string(RunningCount()) + " rank(s)");
    SignalRunning(SIGKILL);
    give_up_at_ = Deadline::AfterMs(kGiveUpAfterKillMs);
  }
  if (give_up_at_ && give_up_at_->expired() && RunningCount() > 0) {
    for (auto& r : ranks_) {
      if (r->running)
        Say("rank " + std::to_string(r->rank) + " (pid " + std::to_string(r->pid) +
            ") did not exit after SIGKILL; giving up on it");
    }
    gave_up_ = true;
  }
}

void Supervisor::ReapOrphans() {
  // Whatever the killed groups left behind has been (or is being) re-parented to us.
  Deadline until = Deadline::AfterMs(1000);
  while (!until.expired()) {
    pid_t pid = waitpid(-1, nullptr, WNOHANG);
    if (pid < 0) return;  // ECHILD: nothing left
    if (pid == 0) usleep(10 * 1000);
  }
}

int Supervisor::Run() {
  if (Status st = Setup(); !st.ok()) {
    Say(st.ToString());
    return 1;
  }
  if (o_.timeout_s > 0) timeout_at_ = Deadline::AfterMs(static_cast<int64_t>(o_.timeout_s * 1000));
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    ranks_.push_back(std::make_unique<Rank>(o_.node_rank * o_.nproc_per_node + local, local));
    if (Status st = Spawn(*ranks_.back()); !st.ok()) {
      Say("launching rank " + std::to_string(ranks_.back()->rank) + ": " + st.ToString());
      ranks_.pop_back();
      exit_code_ = 1;
      BeginStop(SIGTERM);
      break;
    }
  }
  while (true) {
    Reap();
    CheckDeadlines();
    std::vector<Stream*> open;
    for (auto& r : ranks_) {
      for (Stream* s : {&r->out, &r->err}) {
        if (s->fd >= 0) open.push_back(s);
      }
    }
    bool drained = open.empty() || (drain_until_ && drain_until_->expired());
    if (gave_up_ || (RunningCount() == 0 && drained)) {
      for (Stream* s : open) CloseStream(*s);
      break;
    }
    std::vector<pollfd> fds = {{sigfd_, POLLIN, 0}};
    for (Stream* s : open) fds.push_back({s->fd, POLLIN, 0});
    // Wake for the next deadline; 200 ms at most so that no missed edge can stall us.
    Deadline wake = Deadline::AfterMs(200);
    for (auto& d : {timeout_at_, kill_at_, give_up_at_, drain_until_}) {
      if (d) wake = wake.Earlier(*d);
    }
    int n = poll(fds.data(), fds.size(), wake.RemainingMs());
    if (n < 0 && errno != EINTR) {
      Say(IoError("poll", errno).ToString());
      SignalRunning(SIGKILL);
      exit_code_ = 1;
      gave_up_ = true;
      continue;
    }
    if (n <= 0) continue;
    if (fds[0].revents) HandleSignals();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents) Pump(*open[i - 1]);
    }
  }
  ReapOrphans();
  if (exit_code_) return *exit_code_;
  return gave_up_ ? 1 : 0;
}

}  // namespace

int RunLocalRanks(const LaunchOptions& options) { return Supervisor(options).Run(); }

Result<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int e = errno;
    close(fd);
    return IoError("picking a free port", e);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace chorus::launcher
