// Ring all-gather, pipelined in chunks. recv holds n blocks of `count` elements,
// rank i's at i*count (AllGatherRingBlocks: at block(i), of any size, so that a
// broadcast can gather its uneven blocks). With steps s = 0 .. n-2:
//   send block r-s to r+1 (our own block at step 0, from the send buffer),
//   receive block r-s-1 from r-1 straight into recv;
// a block received at step s is the one forwarded at step s+1, so each chunk goes
// on as soon as it lands. Every receive is posted up front (they land in the user
// buffer, so this costs no memory): a message that finds no receive posted is kept
// by the transport and copied again.
//
// On streamed bounce buffers (ctx.staging) each chunk of our own block is waited for
// before it is sent, our block is reported final once it is in recv, and every other
// chunk as it lands.
#include <cstdint>
#include <deque>
#include <functional>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"
#include "algos/ring.h"

namespace chorus::algos {
namespace {

struct PostedRecv {
  transport::RequestPtr req;
  int step;
  Span chunk;
};

}  // namespace

Status AllGatherRingBlocks(const Context& ctx, const void* send, void* recv, size_t es,
                           const std::function<Span(int)>& block, const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const Ring ring = RingOf(ctx);
  const int next = ring.next, prev = ring.prev;
  const int steps = n - 1;
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  const Span own = block(r);

  // Receives are posted into recv: on failure the transport lets go of them before
  // this returns (AbortOnError).
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedRecv> posted;
    for (ChunkWalk w(steps, chunk_elems, [&](int s) { return block(Mod(r - s - 1, n)); }); !w.done(); w.Next()) {
      const Span c = w.chunk();
      posted.push_back(PostedRecv{PostRecv(ctx, prev, w.step(), At(recv, c.offset, es), c.count * es), w.step(), c});
    }

    // Step 0: our own block, from the send buffer (so the local copy below can overlap);
    // then each chunk received at step s goes on at step s+1 as soon as it lands.
    RingSends<PostedRecv> out(ctx, sends, next, send, es, Span{0, own.count}, chunk_elems, SIZE_MAX);
    auto forward = [&](const PostedRecv& f) {
      sends.Post(next, static_cast<uint32_t>(f.step + 1), At(recv, f.chunk.offset, es), f.chunk.count * es);
    };
    CHORUS_RETURN_IF_ERROR(out.Post(forward));
    CopyMovingBytes(ctx, At(recv, own.offset, es), send, own.count * es);
    OutputFinal(ctx, own.offset * es, own.count * es);

    while (!posted.empty()) {
      const PostedRecv p = posted.front();
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *p.req, prev));
      posted.pop_front();
      OutputFinal(ctx, p.chunk.offset * es, p.chunk.count * es);
      if (p.step + 1 < steps) out.Forward(p);  // on at the next step
      CHORUS_RETURN_IF_ERROR(out.Post(forward));
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

Status AllGatherRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                     const Tuning& tuning) {
  const size_t es = DataTypeSize(dtype);
  if (ctx.size() == 1) return CopyAlone(ctx, send, recv, count * es);
  const auto block = [count](int i) { return Span{static_cast<size_t>(i) * count, count}; };
  return AllGatherRingBlocks(ctx, send, recv, es, block, tuning);
}

}  // namespace chorus::algos
