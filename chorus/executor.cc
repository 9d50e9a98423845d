#include "chorus/executor.h"

#include <algorithm>

namespace chorus::internal {

void TaskState::Complete(Status st) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(st);
  done_.store(true, std::memory_order_release);
  cv_.notify_all();
}

bool TaskState::Test() { return done_.load(std::memory_order_acquire); }

Status TaskState::Wait(std::chrono::milliseconds timeout) {
  const auto spin_until = std::chrono::steady_clock::now() + std::min<std::chrono::microseconds>(spin_, timeout);
  while (!Test() && std::chrono::steady_clock::now() < spin_until) std::this_thread::yield();
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_.load(std::memory_order_acquire); })) {
    // The collective itself is bounded by the communicator's deadline and will end;
    // this wait only gives up on it.
    return TimeoutError("collective did not complete within " + std::to_string(timeout.count()) + " ms");
  }
  return status_;
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void Executor::Post(std::function<Status()> task, std::shared_ptr<TaskState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.emplace_back(std::move(task), std::move(state));
  queued_.store(queue_.size(), std::memory_order_release);
  if (!worker_.joinable()) worker_ = std::thread([this] { Loop(); });
  if (sleeping_) cv_.notify_one();
}

void Executor::Loop() {
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    std::pair<std::function<Status()>, std::shared_ptr<TaskState>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_ = true;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      sleeping_ = false;
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_release);
    }
    item.second->Complete(item.first());
  }
}

}  // namespace chorus::internal
