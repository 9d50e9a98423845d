#include "transport/inbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace chorus::transport {

Status Inbox::Init() {
  wake_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
  return wake_fd_.valid() ? Status::Ok() : IoError("eventfd", errno);
}

void Inbox::Wake() {
  uint64_t one = 1;
  if (write(wake_fd_.get(), &one, sizeof(one)) < 0) {
    // The counter cannot overflow in practice; a failed write only delays a wake-up.
  }
}

void Inbox::Post(const BasicRequestPtr& req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      req->Complete(closed_status_);
      return;
    }
    pending_.posts.push_back(req);
  }
  has_work_.store(true);
  if (sleeping_.load()) Wake();
}

void Inbox::Release(uint64_t first, uint64_t last) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  pending_.releases.emplace_back(first, last);
  has_work_.store(true);  // handled with the next wake-up; no need to wake the engine now
}

void Inbox::RequestAbort(const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  closed_status_ = reason;
  pending_.abort = true;
  pending_.abort_reason = reason;
  has_work_.store(true);
  Wake();
}

void Inbox::WaitExit() {
  std::unique_lock<std::mutex> lock(mu_);
  exit_cv_.wait(lock, [this] { return exited_; });
}

void Inbox::Interrupt() {
  has_work_.store(true);
  if (sleeping_.load()) Wake();
}

void Inbox::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.stop = true;
  }
  has_work_.store(true);
  Wake();
}

void Inbox::Drain(Batch* out) {
  out->posts.clear();
  out->releases.clear();
  out->abort = false;
  out->abort_reason = Status::Ok();
  out->stop = false;
  std::lock_guard<std::mutex> lock(mu_);
  std::swap(*out, pending_);
  pending_.stop = out->stop;  // sticky
  has_work_.store(false);
}

void Inbox::Close(const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  closed_status_ = reason;
}

void Inbox::Exit(const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) {
    closed_ = true;
    closed_status_ = reason;
  }
  for (const BasicRequestPtr& r : pending_.posts) r->Complete(closed_status_);
  pending_.posts.clear();
  exited_ = true;
  exit_cv_.notify_all();
}

bool Inbox::BeginSleep() {
  sleeping_.store(true);
  if (has_work_.load()) {
    sleeping_.store(false);
    return false;
  }
  return true;
}

void Inbox::ConsumeWake() {
  uint64_t n;
  if (read(wake_fd_.get(), &n, sizeof(n)) < 0) {
    // EAGAIN cannot happen after poll said readable; anything else is harmless here.
  }
}

void RequestDeadlines::Track(const BasicRequestPtr& req, Clock::time_point now) {
  req->deadline = now + std::chrono::milliseconds(timeout_ms_);
  q_.push_back(req);
  if (q_.size() - head_ >= compact_at_) {  // an old request still pending: drop finished ones behind it
    q_.erase(std::remove_if(q_.begin() + static_cast<long>(head_), q_.end(),
                            [](const BasicRequestPtr& r) { return r->Test(); }),
             q_.end());
    compact_at_ = std::max<size_t>(1024, 2 * (q_.size() - head_));
  }
}

void RequestDeadlines::PopFinished() {
  while (head_ < q_.size() && q_[head_]->Test()) q_[head_++].reset();
  if (head_ > 1024 && head_ * 2 > q_.size()) {
    q_.erase(q_.begin(), q_.begin() + static_cast<long>(head_));
    head_ = 0;
  }
}

BasicRequestPtr RequestDeadlines::Expired(Clock::time_point now) {
  PopFinished();
  if (head_ == q_.size() || now < q_[head_]->deadline) return nullptr;
  return q_[head_];
}

int RequestDeadlines::NextTimeoutMs() {
  PopFinished();
  if (head_ == q_.size()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(q_[head_]->deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 1, 60 * 1000));
}

bool RequestDeadlines::OldestPosted(Clock::time_point* at) {
  PopFinished();
  if (head_ == q_.size()) return false;
  *at = q_[head_]->deadline - std::chrono::milliseconds(timeout_ms_);
  return true;
}

std::vector<BasicRequestPtr> RequestDeadlines::TakeAll() {
  std::vector<BasicRequestPtr> all(q_.begin() + static_cast<long>(head_), q_.end());
  q_.clear();
  head_ = 0;
  return all;
}

}  // namespace chorus::transport
