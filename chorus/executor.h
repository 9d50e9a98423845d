// Runs asynchronous collectives of one communicator on one worker thread, in the
// order they were posted (ranks post in the same order, so they run in the same
// order everywhere). A Work waits on its task's completion.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "chorus/status.h"
#include "chorus/work.h"

namespace chorus::internal {

// The completion of one task: set once by the worker, awaited by Work.
class TaskState : public WorkState {
 public:
  explicit TaskState(std::chrono::milliseconds default_timeout) : default_timeout_(default_timeout) {}
  void Complete(Status st);
  bool Test() override;
  Status Wait(std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds default_timeout() const override { return default_timeout_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::chrono::milliseconds default_timeout_;
};

class Executor {
 public:
  Executor() = default;
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
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace chorus::internal
