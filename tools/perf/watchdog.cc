#include "tools/perf/watchdog.h"

#include <unistd.h>

#include <cstdio>

namespace chorus {
namespace perf {

Watchdog::Watchdog(std::string who) : who_(std::move(who)), thread_([this] { Run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Arm(const std::string& what, std::chrono::milliseconds limit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    what_ = what;
    limit_ = limit;
    deadline_ = std::chrono::steady_clock::now() + limit;
  }
  cv_.notify_all();
}

void Watchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    const auto deadline = deadline_;
    if (cv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;  // re-armed, disarmed or stopping
    if (armed_ && !stop_ && deadline == deadline_) {
      std::fprintf(stderr,
                   "chorus_perf: %s: %s did not return within %lld s (it cannot be interrupted: a peer failed "
                   "or is stuck); exiting\n",
                   who_.c_str(), what_.c_str(), static_cast<long long>(limit_.count() / 1000));
      std::fflush(stderr);
      _exit(1);
    }
  }
}

}  // namespace perf
}  // namespace chorus
