// A handle on an asynchronous operation (torch's Work): Wait() blocks until it ends,
// bounded by the communicator's timeout; Test() never blocks.
#pragma once

#include <chrono>
#include <memory>

#include "common/status.h"

namespace chorus {

namespace internal {
// What a Work waits on; implemented by the communicator for each kind of operation.
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual bool Test() = 0;
  virtual Status Wait(std::chrono::milliseconds timeout) = 0;
  virtual std::chrono::milliseconds default_timeout() const = 0;
};
}  // namespace internal

class Work {
 public:
  Work() = default;  // an empty Work: already complete
  explicit Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}
  // A Work that already failed (e.g. invalid arguments).
  static Work Failed(Status status);

  bool Test() { return !state_ || state_->Test(); }
  Status Wait() { return state_ ? state_->Wait(state_->default_timeout()) : Status::Ok(); }
  Status Wait(std::chrono::milliseconds timeout) { return state_ ? state_->Wait(timeout) : Status::Ok(); }

 private:
  std::shared_ptr<internal::WorkState> state_;
};

}  // namespace chorus
