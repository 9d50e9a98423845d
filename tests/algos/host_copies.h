// A CopyEngine for tests without a GPU (chorus/staging_pipeline.h): copies in order on
// its own thread, each after `delay`, so that copies really are in flight while an
// algorithm runs; Start can be told to fail.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/staging_pipeline.h"

namespace chorus::testing {

class HostCopies final : public internal::CopyEngine {
 public:
  explicit HostCopies(std::chrono::microseconds delay, int fail_at = -1)
      : delay_(delay), fail_at_(fail_at), worker_([this] { Loop(); }) {}
  ~HostCopies() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Result<uint64_t> Start(void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    if (static_cast<int>(started_) == fail_at_)
      return IoError("test copy engine refused copy " + std::to_string(fail_at_), 5);
    queue_.push_back({dst, src, bytes});
    started_log_.push_back({dst, bytes});
    cv_.notify_all();
    return started_++;
  }
  Status Wait(uint64_t ticket, Deadline deadline) override {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_until(l, deadline.at(), [&] { return done_ > ticket; })) return TimeoutError("test copy not done");
    return Status::Ok();
  }
  std::vector<std::pair<void*, size_t>> started() {
    std::lock_guard<std::mutex> l(mu_);
    return started_log_;
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Copy c = queue_.front();
      l.unlock();
      std::this_thread::sleep_for(delay_);
      std::memcpy(c.dst, c.src, c.bytes);
      l.lock();
      queue_.pop_front();
      ++done_;
      cv_.notify_all();
    }
  }

  const std::chrono::microseconds delay_;
  const int fail_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  std::vector<std::pair<void*, size_t>> started_log_;
  uint64_t started_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace chorus::testing
