// Runs asynchronous collectives of one communicator on one worker thread, in the
// order they were posted (ranks post in the same order, so they run in the same
// order everywhere). A Work waits on its task's completion.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "chorus/work.h"
#include "common/status.h"

namespace chorus::internal {

// The completion of one task: set once by the worker, awaited by Work.
class TaskState : public WorkState {
 public:
  // Wait() polls `spin` (yielding the CPU) before it sleeps: a short call's result
  // comes sooner than a sleeping thread wakes.
  explicit TaskState(std::chrono::milliseconds default_timeout,
                     std::chrono::microseconds spin = std::chrono::microseconds(0))
      : default_timeout_(default_timeout), spin_(spin) {}
  void Complete(Status st);
  bool Test() override;
  Status Wait(std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds default_timeout() const override { return default_timeout_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status status_;  // set before done_
  std::chrono::milliseconds default_timeout_;
  std::chrono::microseconds spin_;
};

class Executor {
 public:
  // After a task the worker polls `spin` for the next one before it sleeps.
  explicit Executor(std::chrono::microseconds spin = std::chrono::microseconds(0)) : spin_(spin) {}
  ~Executor();  // runs what was posted, then joins the worker
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues `task`; its Status completes `state`. Starts the worker on first use.
  void Post(std::function<Status()> task, std::shared_ptr<TaskState> state);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<TaskState>>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), read without the lock while polling
  bool stopping_ = false;
  bool sleeping_ = false;  // the worker waits on cv_: Post must wake it
  const std::chrono::microseconds spin_;
  std::thread worker_;
};

}  // namespace chorus::internal
