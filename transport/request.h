// A Send or Recv posted to a transport (TCP or RDMA). The application thread waits on
// it; the transport's engine thread completes it exactly once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/transport.h"

namespace chorus::transport {

class BasicRequest;

// A transport whose application threads may drive its I/O themselves: Wait() hands the
// request to Drive() instead of sleeping until another thread completes it.
class RequestDriver {
 public:
  virtual ~RequestDriver() = default;
  // Performs I/O until the request completes or the deadline passes.
  virtual void Drive(BasicRequest& req, Deadline deadline) = 0;
};

class BasicRequest : public Request {
 public:
  enum class Kind { kSend, kRecv };
  // spin_us: Wait() polls this long (yielding the CPU between looks) before it sleeps.
  // driver: when set, Wait() drives the transport instead (it must outlive every
  // request it did not complete).
  BasicRequest(Kind kind, int self, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint,
               int64_t spin_us = 0, RequestDriver* driver = nullptr)
      : kind_(kind),
        self_(self),
        peer_(peer),
        tag_(tag),
        buf_(static_cast<char*>(buf)),
        bytes_(bytes),
        fingerprint_(fingerprint),
        spin_us_(spin_us),
        driver_(driver) {}

  bool Test() override { return done_.load(std::memory_order_acquire); }
  Status Wait(Deadline deadline) override;
  Status status() override;
  uint64_t remote_fingerprint() override { return remote_fingerprint_.load(std::memory_order_acquire); }

  // Sleeps until the request completes or `until`; returns whether it completed.
  bool WaitUntil(Clock::time_point until);
  // Completes the request; returns false (and changes nothing) when already complete.
  bool Complete(Status status, uint64_t remote_fingerprint = 0);
  // "send to rank 1 tag 7 (1024 bytes)" for error messages.
  std::string Describe() const;

  Kind kind() const { return kind_; }
  int peer() const { return peer_; }
  uint64_t tag() const { return tag_; }
  char* buf() const { return buf_; }
  size_t bytes() const { return bytes_; }
  uint64_t fingerprint() const { return fingerprint_; }

  // Engine-thread bookkeeping for sends striped into several frames.
  int pending_frames = 0;
  Status first_error;
  Clock::time_point deadline{};

 private:
  const Kind kind_;
  const int self_;
  const int peer_;
  const uint64_t tag_;
  char* const buf_;
  const size_t bytes_;
  const uint64_t fingerprint_;
  const int64_t spin_us_;
  RequestDriver* const driver_;

  std::atomic<bool> done_{false};
  std::atomic<uint64_t> remote_fingerprint_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int waiters_ = 0;  // guarded by mu_: skip the notify when nobody sleeps
  Status status_;    // guarded by mu_, final once done_
};

using BasicRequestPtr = std::shared_ptr<BasicRequest>;

}  // namespace chorus::transport
