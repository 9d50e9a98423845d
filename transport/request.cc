#include "transport/request.h"

#include <sched.h>

namespace chorus::transport {

Status BasicRequest::Wait(Deadline deadline) {
  if (driver_ != nullptr) {
    if (!Test()) driver_->Drive(*this, deadline);
  } else if (spin_us_ > 0) {
    // A short message completes within microseconds: a sleeping thread would add a
    // wake-up (tens of microseconds) to every round trip. Yielding keeps the engine
    // and the peer's threads running where cores are scarce.
    const auto until = std::min(Clock::now() + std::chrono::microseconds(spin_us_), deadline.at());
    while (!done_.load(std::memory_order_acquire) && Clock::now() < until) sched_yield();
  }
  if (!WaitUntil(deadline.at())) {
    return TimeoutError("rank " + std::to_string(self_) + ": " + Describe() + " not finished by the deadline");
  }
  // Complete wrote it before publishing done_, which WaitUntil saw: final, read without the lock.
  return status_;
}

bool BasicRequest::WaitUntil(Clock::time_point until) {
  if (Test()) return true;
  std::unique_lock<std::mutex> lock(mu_);
  ++waiters_;
  bool finished = cv_.wait_until(lock, until, [this] { return done_.load(std::memory_order_acquire); });
  --waiters_;
  return finished;
}

Status BasicRequest::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

bool BasicRequest::Complete(Status status, uint64_t remote_fingerprint) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_.load(std::memory_order_relaxed)) return false;
  status_ = std::move(status);
  remote_fingerprint_.store(remote_fingerprint, std::memory_order_release);
  done_.store(true, std::memory_order_release);
  if (waiters_ > 0) cv_.notify_all();
  return true;
}

std::string BasicRequest::Describe() const {
  std::string what = kind_ == Kind::kSend ? "send to rank " : "recv from rank ";
  return what + std::to_string(peer_) + " tag " + std::to_string(tag_) + " (" + std::to_string(bytes_) + " bytes)";
}

}  // namespace chorus::transport
