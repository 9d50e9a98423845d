// A request posted to a peer whose connection is still being made (lazy TCP,
// tcp_lazy.cc): the transport keeps it, with the peer's others in post order, and
// posts it to an engine once the peer's sockets are handed over, or fails it with the
// connection's error. Either way Release gives it the request that finishes it.
// A Wait that would outlast the dial's own deadline first dials the peer itself when
// no dialer took the dial yet (`dial`): where the cores are busy, a dialer thread would
// have to be scheduled first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "transport/request.h"

namespace chorus::transport::tcp {

class ParkedRequest final : public Request {
 public:
  // dial(deadline): dials the peer in this thread if its dial is still queued and its
  // deadline is no later than `deadline`.
  ParkedRequest(BasicRequest::Kind kind, int self, int peer, uint64_t tag, void* buf, size_t bytes,
                uint64_t fingerprint, std::function<void(Deadline)> dial)
      : kind(kind),
        self(self),
        peer(peer),
        tag(tag),
        buf(buf),
        bytes(bytes),
        fingerprint(fingerprint),
        dial_(std::move(dial)) {}

  // Once: the engine's request for this post, or one completed with the connection's error.
  void Release(RequestPtr inner) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      inner_ = std::move(inner);
      released_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  bool Test() override { return released_.load(std::memory_order_acquire) && inner_->Test(); }
  Status Wait(Deadline deadline) override {
    if (!released_.load(std::memory_order_acquire)) dial_(deadline);
    if (!released_.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_until(lock, deadline.at(), [this] { return released_.load(std::memory_order_relaxed); })) {
        return TimeoutError("rank " + std::to_string(self) + ": " +
                            (kind == BasicRequest::Kind::kSend ? "send to rank " : "recv from rank ") +
                            std::to_string(peer) + " tag " + std::to_string(tag) + " (" + std::to_string(bytes) +
                            " bytes) not finished by the deadline: still connecting to rank " + std::to_string(peer));
      }
    }
    // Set before released_ and never again: read without the lock.
    return inner_->Wait(deadline);
  }
  Status status() override { return released_.load(std::memory_order_acquire) ? inner_->status() : Status::Ok(); }
  uint64_t remote_fingerprint() override {
    return released_.load(std::memory_order_acquire) ? inner_->remote_fingerprint() : 0;
  }

  // What the transport posts once the peer is connected.
  const BasicRequest::Kind kind;
  const int self;
  const int peer;
  const uint64_t tag;
  void* const buf;
  const size_t bytes;
  const uint64_t fingerprint;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> released_{false};
  const std::function<void(Deadline)> dial_;  // the transport's; not called once released
  RequestPtr inner_;                          // set once, before released_
};

}  // namespace chorus::transport::tcp
