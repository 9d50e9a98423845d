#include "chorus/executor.h"

namespace chorus::internal {

void TaskState::Complete(Status st) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(st);
  done_ = true;
  cv_.notify_all();
}

bool TaskState::Test() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status TaskState::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
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
  if (!worker_.joinable()) worker_ = std::thread([this] { Loop(); });
  cv_.notify_one();
}

void Executor::Loop() {
  for (;;) {
    std::pair<std::function<Status()>, std::shared_ptr<TaskState>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    item.second->Complete(item.first());
  }
}

}  // namespace chorus::internal
