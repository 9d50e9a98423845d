// Ring reduce-scatter, pipelined in chunks. send holds n blocks of `count` elements
// (ReduceScatterRingBlocks: blocks anywhere in send, of any sizes); rank r ends with
// block r reduced over all ranks. With steps s = 0 .. n-2:
//   send block r-s-1 to r+1 (at step 0 straight from the send buffer, later the
//   partial result received and reduced at step s-1),
//   receive block r-s-2 from r-1 and reduce our own contribution into it;
// the block received at the last step (n-2) is block r, reduced into recv.
// Partial results live in scratch chunks (the send buffer is const; recv only has
// room for our block), recycled once the send that forwards them has completed.
// Receives are posted a few ahead, each into a scratch chunk; what we send goes out in
// the order the peer consumes it (step by step: the first block, then each partial
// sum) and at most kRecvsInFlight chunks ahead of what we have received, so that it
// mostly finds its receive posted. A transport keeps a message that arrives first and
// copies it again; a partial sum waiting here for its turn costs nothing (it is ready
// a step before the peer wants it).
//
// On streamed bounce buffers (ctx.staging) every chunk of the send buffer is waited
// for before it is sent or reduced, and each chunk of our block is reported final once
// reduced into recv.
#include <deque>
#include <functional>
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

// Receives posted ahead of the one being reduced, each into its own scratch chunk; and
// how far our sends run ahead of our receives.
constexpr size_t kRecvsInFlight = 4;

struct PostedRecv {
  transport::RequestPtr req;
  int step;
  Span chunk;  // elements of the send buffer
  int slot;
};

}  // namespace

Status ReduceScatterRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = DataTypeSize(dtype);
  if (n == 1) return CopyAlone(ctx, send, recv, count * es);
  // Streamed: the input comes to the host in the order this rank reads it, blocks r-1, r-2, ...
  InputOrder(ctx, [&] { return InputReadOrder(Collective::kReduceScatter, Algorithm::kRing, r, n, count, dtype); });
  return ReduceScatterRingBlocks(
      ctx, send, recv, dtype, op,
      [count](int i) {
        return Span{static_cast<size_t>(i) * count, count};
      },
      tuning);
}

Status ReduceScatterRingBlocks(const Context& ctx, const void* send, void* recv, DataType dtype, ReduceOp op,
                               const std::function<Span(int)>& block, const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = DataTypeSize(dtype);
  const Ring ring = RingOf(ctx);
  const int next = ring.next, prev = ring.prev;
  const int steps = n - 1;
  const int last_step = n - 2;
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);

  ChunkPool pool(chunk_elems * es, ctx.scratch);
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedRecv> posted;
    ChunkWalk to_post(steps, chunk_elems, [&](int s) { return block(Mod(r - s - 2, n)); });
    auto post_next = [&]() -> Status {
      if (to_post.done()) return Status::Ok();
      const Span c = to_post.chunk();
      Result<int> slot = pool.Acquire();
      if (!slot.ok()) return slot.status();
      posted.push_back(
          PostedRecv{PostRecv(ctx, prev, to_post.step(), pool.data(*slot), c.count * es), to_post.step(), c, *slot});
      to_post.Next();
      return Status::Ok();
    };
    for (size_t i = 0; i < kRecvsInFlight; ++i) CHORUS_RETURN_IF_ERROR(post_next());

    // What we send, in order: block r-1 from our send buffer (step 0), then each
    // partial result as it is reduced (steps 1 .. n-2), paced by what we receive; a
    // scratch chunk is free again once the send forwarding it completed.
    RingSends<PostedRecv> out(ctx, sends, next, send, es, block(Mod(r - 1, n)), chunk_elems, kRecvsInFlight);
    auto post_sends = [&] {
      return out.Post([&](const PostedRecv& f) {
        pool.ReleaseAfter(f.slot,
                          sends.Post(next, static_cast<uint32_t>(f.step + 1), pool.data(f.slot), f.chunk.count * es));
      });
    };
    CHORUS_RETURN_IF_ERROR(post_sends());

    const size_t own_offset = block(r).offset;
    while (!posted.empty()) {
      const PostedRecv p = posted.front();
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *p.req, prev));
      posted.pop_front();
      out.Received();
      char* partial = pool.data(p.slot);
      const char* mine = At(send, p.chunk.offset, es);
      CHORUS_RETURN_IF_ERROR(InputReady(ctx, p.chunk.offset * es, p.chunk.count * es));
      if (p.step < last_step) {
        // Add our contribution to the partial result; it goes on in its turn.
        CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, partial, mine, partial, p.chunk.count));
        out.Forward(p);
      } else {
        // Our own block: everyone else's contributions are in; the result goes to recv.
        char* out = At(recv, p.chunk.offset - own_offset, es);
        CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, out, mine, partial, p.chunk.count));
        if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, out, p.chunk.count, n));
        OutputFinal(ctx, (p.chunk.offset - own_offset) * es, p.chunk.count * es);
        pool.Release(p.slot);
      }
      CHORUS_RETURN_IF_ERROR(post_sends());
      CHORUS_RETURN_IF_ERROR(post_next());
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
