// What the ring algorithms share (allreduce_ring.cc, reduce_scatter_ring.cc,
// allgather_ring.cc): the ring r -> r+1, and the sends that go round it in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/context.h"
#include "algos/pending_sends.h"

namespace chorus::algos {

// This rank's neighbours on the ring r -> r+1: it sends to next, receives from prev.
struct Ring {
  int next;
  int prev;
};
inline Ring RingOf(const Context& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  return Ring{(r + 1) % n, (r + n - 1) % n};
}

// What a rank sends downstream, in the order the next rank consumes it: its own block
// from the send buffer at step 0, then each chunk it received (and reduced) at step s,
// forwarded at step s+1. At most `ahead` chunks go out past those received here
// (SendPacer; SIZE_MAX: unpaced), so that a peer that receives into a few scratch
// chunks mostly finds its receive posted. Posted is the algorithm's record of a
// received chunk; it has `step`.
template <typename Posted>
class RingSends {
 public:
  // own: our block, in elements of `send` (of `es` bytes each), cut into chunks.
  RingSends(const Context& ctx, PendingSends& sends, int next, const void* send, size_t es, Span own,
            size_t chunk_elems, size_t ahead)
      : ctx_(ctx),
        sends_(sends),
        next_(next),
        send_(send),
        es_(es),
        own_(1, chunk_elems, [own](int) { return own; }),
        pacer_(ahead) {}

  // A chunk received here; it goes on in its turn (Post).
  void Forward(const Posted& p) { forwards_.push_back(p); }
  // A receive completed: one more chunk may go out.
  void Received() { pacer_.Received(); }
  // Posts what may go now, in order; forward(p) posts a forwarded chunk at p.step + 1.
  template <typename PostForward>
  Status Post(PostForward&& forward) {
    for (; pacer_.MaySend(); pacer_.Sent()) {
      if (!own_.done()) {
        const Span c = own_.chunk();
        CHORUS_RETURN_IF_ERROR(InputReady(ctx_, c.offset * es_, c.count * es_));
        sends_.Post(next_, 0, At(send_, c.offset, es_), c.count * es_);
        own_.Next();
      } else if (!forwards_.empty()) {
        forward(forwards_.front());
        forwards_.pop_front();
      } else {
        break;
      }
    }
    return Status::Ok();
  }

 private:
  const Context& ctx_;
  PendingSends& sends_;
  const int next_;
  const void* const send_;
  const size_t es_;
  ChunkWalk own_;
  SendPacer pacer_;
  Fifo<Posted> forwards_;
};

}  // namespace chorus::algos
