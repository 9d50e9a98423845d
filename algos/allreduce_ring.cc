// Ring all-reduce: a reduce-scatter followed by an all-gather around the ring
// r -> r+1, pipelined in chunks.
//
// The buffer is cut into n blocks (EvenBlock). With steps s = 0 .. 2(n-1)-1:
//   reduce-scatter, s < n-1:  send block r-s to r+1, receive block r-s-1 from r-1
//                             and reduce it with our own contribution;
//                             after step n-2 block r+1 is complete here.
//   all-gather, s >= n-1:     forward the complete block received last step,
//                             receive block r-(s-n+1) (complete) from r-1.
// A block sent at step s > 0 is exactly the block received at step s-1, so every
// received chunk is forwarded as soon as it is reduced.
//
// recv is the accumulator: reduce(send_block, received) -> recv_block, which is also
// correct in place (send == recv). The send buffer is never written.
//
// On streamed bounce buffers (ctx.staging) every input chunk is waited for before it
// is sent or reduced, and every block is reported final where it becomes complete: at
// its last reduce-scatter step here, or when its all-gather receive lands.
//
// Receives are posted before their data can arrive wherever memory allows (a TCP
// transport buffers and copies a message that arrives first):
//   - all-gather receives, all up front. They overwrite blocks this rank forwarded
//     earlier, but the data that lands there was computed from what we forwarded, so
//     the transport has read those bytes out before it arrives;
//   - reduce-scatter receives out of place, blocks of up to kWindowAboveChunks
//     chunks: all up front, straight into recv (its block there is not written yet),
//     reduced in place; no scratch;
//   - reduce-scatter receives in place (recv holds our own contribution), and out of
//     place for larger blocks ("windowed"): into a few scratch chunks. Then what we
//     send into the peer's reduce-scatter (our own block, and each partial sum we
//     forward) goes out in the order the peer consumes it (step by step) and paced by
//     what arrives from upstream (one chunk out per chunk in), so that the peer's
//     receives are mostly posted when our chunks land. A forwarded partial sum is
//     ready long before the peer wants it (it finishes the step before first); it
//     waits in our recv buffer, not copied into the peer's transport.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/input_order.h"
#include "algos/pending_sends.h"
#include "algos/ring.h"
#include "kernels/reduce.h"

namespace chorus::algos {
namespace {

// Windowed: receives posted ahead of the one being processed (each holds a scratch
// chunk in the reduce-scatter phase).
constexpr size_t kRecvsInFlight = 4;
// Out of place, blocks of more chunks than this run windowed too: receives posted for
// a whole large block land long before they are reduced, so the reduction reads them
// from memory rather than cache; smaller blocks gained nothing so they stay unwindowed
// (docs/design/flow_control.md). In chunks.
constexpr size_t kWindowAboveChunks = 32;

struct PostedRecv {
  transport::RequestPtr req;
  int step;
  Span chunk;
  char* scratch;  // null where received in place (all-gather, or out of place)
};

}  // namespace

Status AllReduceRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = DataTypeSize(dtype);
  if (n == 1) return CopyAlone(ctx, send, recv, count * es);
  const Ring ring = RingOf(ctx);
  const int next = ring.next, prev = ring.prev;
  const int steps = 2 * (n - 1);
  const int last_rs_step = n - 2;
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  // The block this rank receives at step s; it sends at step s the block it received
  // at step s-1 (its own block r at step 0).
  auto recv_block = [&](int s) {
    return EvenBlock(count, n, s < n - 1 ? Mod(r - s - 1, n) : Mod(r - (s - (n - 1)), n));
  };

  // Streamed: the input comes to the host in the order this rank reads it, blocks r, r-1, ...
  InputOrder(ctx, [&] { return InputReadOrder(Collective::kAllReduce, Algorithm::kRing, r, n, count, dtype); });
  const bool in_place = send == recv;
  const bool windowed = in_place || NumChunks(EvenBlock(count, n, 0).count, chunk_elems) > kWindowAboveChunks;
  const size_t rs_window = windowed ? kRecvsInFlight : SIZE_MAX;
  // Scratch for the in-place reduce-scatter: one slot per receive in flight, each as
  // large as a chunk can be here (a block may be smaller than a chunk).
  const size_t slot_elems = std::min(chunk_elems, EvenBlock(count, n, 0).count);
  BufferCache::Buffer scratch = windowed ? ctx.Scratch(kRecvsInFlight * slot_elems * es) : BufferCache::Buffer();
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedRecv> rs, ag;  // posted, in the order they are processed
    ChunkWalk rs_walk(n - 1, chunk_elems, recv_block);
    ChunkWalk ag_walk(n - 1, chunk_elems, [&](int k) { return recv_block(k + n - 1); });
    size_t rs_count = 0;
    auto post_rs = [&] {
      const Span c = rs_walk.chunk();
      char* slot = windowed ? scratch.data() + (rs_count++ % kRecvsInFlight) * slot_elems * es : nullptr;
      char* dst = slot ? slot : At(recv, c.offset, es);
      rs.push_back(PostedRecv{PostRecv(ctx, prev, rs_walk.step(), dst, c.count * es), rs_walk.step(), c, slot});
      rs_walk.Next();
    };
    for (; !ag_walk.done(); ag_walk.Next()) {
      const Span c = ag_walk.chunk();
      const int s = ag_walk.step() + n - 1;
      ag.push_back(PostedRecv{PostRecv(ctx, prev, s, At(recv, c.offset, es), c.count * es), s, c, nullptr});
    }
    while (!rs_walk.done() && rs.size() < rs_window) post_rs();

    // What goes into the peer's reduce-scatter, in the order it consumes it: our own
    // block (step 0) from the send buffer, then the partial sums we forward (steps 1 ..
    // n-2). Windowed, at most kRecvsInFlight of it ahead of what we have received.
    RingSends<PostedRecv> rs_out(ctx, sends, next, send, es, EvenBlock(count, n, r), chunk_elems, rs_window);
    auto post_rs_sends = [&] {
      return rs_out.Post([&](const PostedRecv& f) {
        sends.Post(next, static_cast<uint32_t>(f.step + 1), At(recv, f.chunk.offset, es), f.chunk.count * es);
      });
    };
    CHORUS_RETURN_IF_ERROR(post_rs_sends());

    while (!rs.empty() || !ag.empty()) {
      std::deque<PostedRecv>& q = rs.empty() ? ag : rs;
      const PostedRecv p = q.front();
      q.pop_front();
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *p.req, prev));
      rs_out.Received();
      char* mine = At(recv, p.chunk.offset, es);
      const size_t off = p.chunk.offset * es, len = p.chunk.count * es;
      if (p.step <= last_rs_step) {
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, off, len));
        // Reduce-scatter: accumulate the partial sum from upstream with our own data.
        // Unwindowed every receive is posted, so bytes moved while we reduce land in
        // place; windowed they would mostly arrive before their receive (and be copied
        // twice), so there the wire waits for the next Wait.
        if (windowed) {
          CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, mine, At(send, p.chunk.offset, es),
                                                 p.scratch ? p.scratch : mine, p.chunk.count));
        } else {
          CHORUS_RETURN_IF_ERROR(
              ReduceMovingBytes(ctx, dtype, op, mine, At(send, p.chunk.offset, es), mine, p.chunk.count));
        }
        // Complete after the last reduce-scatter step: AVG divides here, once, before
        // the all-gather spreads the result.
        if (p.step == last_rs_step && op == ReduceOp::kAvg) {
          CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, mine, p.chunk.count, n));
        }
        if (p.step == last_rs_step) OutputFinal(ctx, off, len);  // this block is complete here
        if (!rs_walk.done()) post_rs();                          // the scratch slot just consumed is free again
      } else {
        OutputFinal(ctx, off, len);  // all-gather: received complete
      }
      // Forward what we just produced (or received, in the all-gather) at the next
      // step: into the peer's reduce-scatter in turn, into its all-gather at once (all
      // its all-gather receives are posted), behind what its reduce-scatter waits for.
      if (p.step + 1 <= last_rs_step) rs_out.Forward(p);
      CHORUS_RETURN_IF_ERROR(post_rs_sends());
      if (p.step + 1 > last_rs_step && p.step + 1 < steps) {
        sends.Post(next, static_cast<uint32_t>(p.step + 1), mine, len);
      }
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
