// Ring all-gather, pipelined in chunks. recv holds n blocks of `count` elements,
// rank i's at i*count. With steps s = 0 .. n-2:
//   send block r-s to r+1 (our own block at step 0, from the send buffer),
//   receive block r-s-1 from r-1 straight into recv;
// a block received at step s is the one forwarded at step s+1, so each chunk goes
// on as soon as it lands. Every receive is posted up front (they land in the user
// buffer, so this costs no memory): a message that finds no receive posted is kept
// by the transport and copied again.
//
// On streamed device stand-ins (ctx.staging) each chunk of our own block is waited for
// before it is sent, our block is reported final once it is in recv, and every other
// chunk as it lands.
#include <deque>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"

namespace chorus::algos {
namespace {

struct PostedRecv {
  transport::RequestPtr req;
  int step;
  Span chunk;
};

}  // namespace

Status AllGatherRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                     const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = DataTypeSize(dtype);
  const auto block = [&](int i) { return Span{static_cast<size_t>(i) * count, count}; };
  if (n == 1) {
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, count * es));
    CopyIfDistinct(recv, send, count * es);
    OutputFinal(ctx, 0, count * es);
    return Status::Ok();
  }
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const int steps = n - 1;
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);

  // Receives are posted into recv: on failure the transport lets go of them before
  // this returns (AbortOnError).
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedRecv> posted;
    for (ChunkWalk w(steps, chunk_elems, [&](int s) { return block(Mod(r - s - 1, n)); }); !w.done(); w.Next()) {
      const Span c = w.chunk();
      posted.push_back(PostedRecv{PostRecv(ctx, prev, w.step(), At(recv, c.offset, es), c.count * es), w.step(), c});
    }

    // Step 0: our own block, from the send buffer (so the local copy below can overlap).
    ChunkWalk own(1, chunk_elems, [&](int) { return Span{0, count}; });
    for (; !own.done(); own.Next()) {
      const Span c = own.chunk();
      CHORUS_RETURN_IF_ERROR(InputReady(ctx, c.offset * es, c.count * es));
      sends.Post(next, 0, At(send, c.offset, es), c.count * es);
    }
    CopyMovingBytes(ctx, At(recv, block(r).offset, es), send, count * es);
    OutputFinal(ctx, block(r).offset * es, count * es);

    while (!posted.empty()) {
      const PostedRecv p = posted.front();
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *p.req, prev));
      posted.pop_front();
      OutputFinal(ctx, p.chunk.offset * es, p.chunk.count * es);
      // Forward the chunk just received at the next step.
      if (p.step + 1 < steps) {
        sends.Post(next, static_cast<uint32_t>(p.step + 1), At(recv, p.chunk.offset, es), p.chunk.count * es);
      }
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
