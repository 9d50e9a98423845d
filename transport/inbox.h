// How application threads hand work to a transport's engine thread: posted requests,
// released tag ranges, abort and stop, behind one lock, with an eventfd that wakes the
// engine only when it sleeps (a Dekker-style hand-shake on two atomics).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "transport/request.h"

namespace chorus::transport {

class Inbox {
 public:
  struct Batch {
    std::vector<BasicRequestPtr> posts;
    std::vector<std::pair<uint64_t, uint64_t>> releases;
    bool abort = false;
    Status abort_reason;
    bool stop = false;
  };

  // Creates the eventfd (blocking: the engine reads it only after poll reported it).
  Status Init();
  int wake_fd() const { return wake_fd_.get(); }

  // ---- Application threads ----
  // Queues the request, or completes it at once with the reason the inbox closed.
  void Post(const BasicRequestPtr& req);
  void Release(uint64_t first, uint64_t last);
  // Asks for an abort, then waits until the engine exited (it touches no user buffer
  // any more). Idempotent.
  void AbortAndWait(const Status& reason) {
    RequestAbort(reason);
    WaitExit();
  }
  void RequestAbort(const Status& reason);
  void WaitExit();
  void RequestStop();
  // Makes a sleeping engine's poll return (an application thread wants to drive).
  void Interrupt();

  // ---- Engine thread ----
  // Moves what was posted into *out (emptied first). Reusing one Batch keeps both
  // vectors' capacity: posting then allocates nothing in the steady state.
  void Drain(Batch* out);
  // From now on posts fail at once with `reason` (the first reason wins).
  void Close(const Status& reason);
  // The engine is gone: fails what was posted after the last Drain and wakes AbortAndWait.
  void Exit(const Status& reason);
  // Before sleeping: returns false when work is waiting (do not sleep). After waking,
  // EndSleep(); ConsumeWake() once poll reported the eventfd readable.
  bool BeginSleep();
  // Work is waiting (for a bounded poll before sleeping).
  bool HasWork() const { return has_work_.load(std::memory_order_relaxed); }
  void EndSleep() { sleeping_.store(false); }
  void ConsumeWake();

 private:
  void Wake();

  UniqueFd wake_fd_;
  std::mutex mu_;
  Batch pending_;
  bool closed_ = false;
  Status closed_status_;
  bool exited_ = false;
  std::condition_variable exit_cv_;
  std::atomic<bool> has_work_{false};
  std::atomic<bool> sleeping_{false};
};

// The first error that broke a transport (what Transport::health() reports): set by the
// engine thread, read by any thread.
class FirstError {
 public:
  Status Get() {
    // Every call asks, almost always of a healthy transport: no lock until an error is set.
    if (!set_.load(std::memory_order_acquire)) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  void Set(const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.ok() || st.ok()) return;
    status_ = st;
    set_.store(true, std::memory_order_release);
  }

 private:
  std::atomic<bool> set_{false};
  std::mutex mu_;
  Status status_;
};

// Per-request deadlines in posting order (hence in deadline order).
class RequestDeadlines {
 public:
  explicit RequestDeadlines(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}
  void Track(const BasicRequestPtr& req, Clock::time_point now = Clock::now());
  // The oldest unfinished request once its deadline passed, else null.
  BasicRequestPtr Expired(Clock::time_point now = Clock::now());
  // Milliseconds until the next deadline (-1: none), at most a minute.
  int NextTimeoutMs();
  // When the oldest unfinished request was posted; false when none is.
  bool OldestPosted(Clock::time_point* at);
  // Every tracked request, for the final sweep of an abort; then forgets them.
  std::vector<BasicRequestPtr> TakeAll();
  int64_t timeout_ms() const { return timeout_ms_; }

 private:
  void PopFinished();
  const int64_t timeout_ms_;
  std::vector<BasicRequestPtr> q_;
  size_t head_ = 0;
  size_t compact_at_ = 1024;
};

}  // namespace chorus::transport
