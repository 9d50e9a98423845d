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
// received chunk is forwarded as soon as it is reduced: chunk i goes out while
// chunk i+1 arrives and chunk i+2's receive is already posted.
//
// recv is the accumulator: reduce(send_block, received) -> recv_block, which is also
// correct in place (send == recv). The send buffer is never written.
//
// Out of place, a partial sum is received straight into recv (its block there is not
// yet written) and reduced in place, so every receive is posted up front: no scratch,
// and no message arrives before its receive (a TCP transport would buffer and copy
// it). The all-gather receives may overwrite blocks that this rank forwarded earlier:
// the data that arrives there was computed from what we forwarded, so the transport
// has read those bytes out already. In place, partial sums wait in a few scratch chunks.
#include <cstdint>
#include <deque>
#include <vector>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"
#include "kernels/reduce.h"

namespace chorus::algos {
namespace {

// In place: receives posted ahead of the one being processed (each holds a scratch
// chunk in the reduce-scatter phase).
constexpr size_t kRecvsInFlight = 2;

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
  if (n == 1) {
    CopyIfDistinct(recv, send, count * es);
    return Status::Ok();
  }
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const int steps = 2 * (n - 1);
  const int last_rs_step = n - 2;
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  // The block this rank receives at step s; it sends at step s the block it received
  // at step s-1 (its own block r at step 0).
  auto recv_block = [&](int s) {
    return EvenBlock(count, n, s < n - 1 ? Mod(r - s - 1, n) : Mod(r - (s - (n - 1)), n));
  };

  const bool in_place = send == recv;
  const size_t window = in_place ? kRecvsInFlight : SIZE_MAX;
  std::vector<char> scratch(in_place ? kRecvsInFlight * chunk_elems * es : 0);
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedRecv> posted;
    ChunkWalk to_post(steps, chunk_elems, recv_block);
    size_t posted_count = 0;
    auto post_next = [&] {
      if (to_post.done()) return;
      const int s = to_post.step();
      const Span c = to_post.chunk();
      char* scratch_slot = nullptr;
      char* dst = At(recv, c.offset, es);
      if (s <= last_rs_step && in_place) {
        scratch_slot = scratch.data() + (posted_count % kRecvsInFlight) * chunk_elems * es;
        dst = scratch_slot;
      }
      posted.push_back(PostedRecv{PostRecv(ctx, prev, s, dst, c.count * es), s, c, scratch_slot});
      ++posted_count;
      to_post.Next();
    };
    while (!to_post.done() && posted.size() < window) post_next();

    // Step 0: our own block goes out straight from the send buffer.
    ChunkWalk own(1, chunk_elems, [&](int) { return EvenBlock(count, n, r); });
    for (; !own.done(); own.Next()) sends.Post(next, 0, At(send, own.chunk().offset, es), own.chunk().count * es);

    while (!posted.empty()) {
      const PostedRecv p = posted.front();
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *p.req, prev));
      char* mine = At(recv, p.chunk.offset, es);
      if (p.step <= last_rs_step) {
        // Reduce-scatter: accumulate the partial sum from upstream with our own data.
        CHORUS_RETURN_IF_ERROR(
            kernels::Reduce(dtype, op, mine, At(send, p.chunk.offset, es), p.scratch ? p.scratch : mine, p.chunk.count));
        // Complete after the last reduce-scatter step: AVG divides here, once, before
        // the all-gather spreads the result.
        if (p.step == last_rs_step && op == ReduceOp::kAvg) {
          CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, mine, p.chunk.count, n));
        }
      }
      posted.pop_front();
      // Forward what we just produced (or received, in the all-gather) at the next step.
      if (p.step + 1 < steps) sends.Post(next, static_cast<uint32_t>(p.step + 1), mine, p.chunk.count * es);
      if (posted.size() < window) post_next();  // the scratch slot just consumed is free again
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
