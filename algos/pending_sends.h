// The sends an algorithm has posted and not yet seen complete. Algorithms never block
// on a send in the middle of a schedule (that is how rings deadlock when a transport
// only completes a send once the peer posts the receive); they reap completed ones as
// they go, so errors surface early, and wait for the rest before returning, because
// the transport reads user buffers until then.
#pragma once

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "algos/buffer.h"
#include "algos/context.h"
#include "algos/fingerprint.h"
#include "kernels/reduce.h"

namespace chorus::algos {

// A first-in first-out queue in a vector: popping moves a head index, and the storage
// is reused once the queue empties. A std::deque allocates when it is made, and the
// algorithms make these on every call, where allocations are much of a small call's cost.
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  T& front() { return items_[head_]; }
  void push_back(T v) { items_.push_back(std::move(v)); }
  void pop_front() {
    items_[head_++] = T();
    if (head_ == items_.size()) {
      head_ = 0;
      items_.clear();
    }
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

class PendingSends {
 public:
  explicit PendingSends(const Context& ctx) : ctx_(ctx) {}

  // Posts a send and tracks it; returns the request (to guard a scratch slot).
  transport::RequestPtr Post(int peer, uint32_t step, const void* buf, size_t bytes) {
    transport::RequestPtr req = ctx_.transport.Send(peer, ctx_.tag(step), buf, bytes, ctx_.fingerprint);
    q_.push_back({req, peer});
    return req;
  }
  // Drops the completed sends at the front; returns the first failure among them.
  Status Reap() {
    while (!q_.empty() && q_.front().first->Test()) {
      CHORUS_RETURN_IF_ERROR(WaitRequest(ctx_, *q_.front().first, q_.front().second, DescribeFingerprint));
      q_.pop_front();
    }
    return Status::Ok();
  }
  Status WaitAll() {
    while (!q_.empty()) {
      CHORUS_RETURN_IF_ERROR(WaitRequest(ctx_, *q_.front().first, q_.front().second, DescribeFingerprint));
      q_.pop_front();
    }
    return Status::Ok();
  }

 private:
  const Context& ctx_;
  Fifo<std::pair<transport::RequestPtr, int>> q_;
};

// Paces what a rank sends into its peer's windowed receives (a few scratch chunks,
// posted in step order): at most `ahead` sends past the receives completed here, since
// round a ring the peer runs at our pace. SIZE_MAX: no pacing.
class SendPacer {
 public:
  explicit SendPacer(size_t ahead) : ahead_(ahead) {}
  void Received() { ++received_; }
  bool MaySend() const { return sent_ < received_ || sent_ - received_ < ahead_; }
  void Sent() { ++sent_; }

 private:
  const size_t ahead_;
  size_t sent_ = 0, received_ = 0;
};

// Posts a receive carrying this call's fingerprint at ctx.tag(step).
inline transport::RequestPtr PostRecv(const Context& ctx, int peer, uint32_t step, void* buf, size_t bytes) {
  return ctx.transport.Recv(peer, ctx.tag(step), buf, bytes, ctx.fingerprint);
}

inline Status Wait(const Context& ctx, transport::Request& req, int peer) {
  return WaitRequest(ctx, req, peer, DescribeFingerprint);
}

// An extra rank of a world that is not a power of two (recursive doubling, Rabenseifner):
// hands `data` to `partner`, which folds it in, and waits for the result in `result`
// at step `result_step`. The result lands only after the partner has read our data (it
// needs it to compute the result), so the receive may be posted first.
inline Status FoldOut(const Context& ctx, int partner, const void* data, void* result, size_t bytes,
                      uint32_t result_step) {
  transport::RequestPtr in = PostRecv(ctx, partner, result_step, result, bytes);
  transport::RequestPtr out = ctx.transport.Send(partner, ctx.tag(0), data, bytes, ctx.fingerprint);
  CHORUS_RETURN_IF_ERROR(Wait(ctx, *out, partner));
  return Wait(ctx, *in, partner);
}

// dst = a op b in slices of 64 KiB, letting the transport move bytes between slices: a
// transport driven by its callers (TCP) sends and receives nothing while this thread
// computes, so a long reduction would leave the wire idle.
inline Status ReduceMovingBytes(const Context& ctx, DataType dtype, ReduceOp op, void* dst, const void* a,
                                const void* b, size_t count) {
  const size_t es = DataTypeSize(dtype);
  const size_t slice = std::max<size_t>(1, (64 << 10) / es);
  for (size_t off = 0; off < count; off += slice) {
    const size_t n = std::min(slice, count - off);
    CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, static_cast<char*>(dst) + off * es,
                                           static_cast<const char*>(a) + off * es,
                                           static_cast<const char*>(b) + off * es, n));
    if (off + n < count) ctx.transport.Progress();
  }
  return Status::Ok();
}

// CopyIfDistinct in slices of 256 KiB, letting the transport move bytes between them
// (as ReduceMovingBytes): a rank's copy of its own block would otherwise stall what its
// peers send it meanwhile. Overlapping distinct ranges are copied whole (memmove).
inline void CopyMovingBytes(const Context& ctx, void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d == s || bytes == 0) return;
  if (d < s + bytes && s < d + bytes) return (void)std::memmove(d, s, bytes);
  constexpr size_t kSlice = 256 << 10;
  for (size_t off = 0; off < bytes; off += kSlice) {
    std::memcpy(d + off, s + off, std::min(kSlice, bytes - off));
    if (off + kSlice < bytes) ctx.transport.Progress();
  }
}

// A world of one rank: the result is the input, copied where the buffers differ.
inline Status CopyAlone(const Context& ctx, const void* send, void* recv, size_t bytes) {
  CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, bytes));
  CopyIfDistinct(recv, send, bytes);
  OutputFinal(ctx, 0, bytes);
  return Status::Ok();
}

// Runs an algorithm's body, which may post requests into scratch memory the caller
// owns: on failure the transport is aborted before returning, because requests still
// posted into that memory only let go of it once the transport is aborted, and the
// memory is freed as soon as the algorithm returns.
template <typename Body>
Status AbortOnError(const Context& ctx, Body&& body) {
  Status st = body();
  if (!st.ok()) ctx.transport.Abort(st);
  return st;
}

}  // namespace chorus::algos
