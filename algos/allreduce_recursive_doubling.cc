// Recursive-doubling all-reduce: log2(p) rounds of pairwise exchange, where p is the
// largest power of two <= n. In round k rank v swaps its whole partial result with
// v ^ 2^k and both reduce, so after the last round every rank holds everything.
//
// n not a power of two: the first e = n - p ranks ("extra") fold their data into
// partner e + i first and get the result back at the end:
//   step 0           extra rank i sends its data to rank e + i, which reduces it in;
//   steps 1..log2 p  ranks e .. n-1 (virtual ranks 0 .. p-1) exchange and reduce;
//   step log2 p + 1  rank e + i sends the result to extra rank i.
// The operands of every reduction are ordered by rank (lower group first), so all
// ranks compute bit-identical results even for non-commutative corner cases
// (max(+0, -0), NaN payloads).
#include <memory>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"
#include "kernels/reduce.h"

namespace chorus::algos {

Status AllReduceRecursiveDoubling(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t bytes = count * DataTypeSize(dtype);
  CopyIfDistinct(recv, send, bytes);
  if (n == 1) return Status::Ok();

  const PowerOfTwoFold fold = FoldOf(n);
  const int rounds = fold.rounds, extra = fold.extra;
  const uint32_t unfold_step = static_cast<uint32_t>(rounds + 1);
  // Small calls (the ones this algorithm is for) receive on the stack: the scratch
  // cache's lock and map cost more than the message.
  alignas(64) char small[512];
  BufferCache::Buffer scratch;
  char* const in_buf = bytes <= sizeof(small) ? small : (scratch = ctx.Scratch(bytes)).data();

  return AbortOnError(ctx, [&]() -> Status {
    // Step 0: extra ranks hand their data to their partner and wait for the result.
    if (r < extra) return FoldOut(ctx, r + extra, recv, recv, bytes, unfold_step);
    if (r < 2 * extra) {
      const int partner = r - extra;
      transport::RequestPtr in = PostRecv(ctx, partner, 0, in_buf, bytes);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, partner));
      // The extra rank is the lower one: its data is the left operand.
      CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, recv, in_buf, recv, count));
    }

    // Steps 1..rounds: exchange with the partner at distance 2^k among virtual ranks.
    const int v = r - extra;
    for (int k = 0; k < rounds; ++k) {
      const int peer_v = v ^ (1 << k);
      const int peer = peer_v + extra;
      const uint32_t step = static_cast<uint32_t>(k + 1);
      // The send first: the partner waits for it, while a message that comes before its
      // receive is posted only waits (matched at once, or kept as an early message).
      transport::RequestPtr out = ctx.transport.Send(peer, ctx.tag(step), recv, bytes, ctx.fingerprint);
      transport::RequestPtr in = PostRecv(ctx, peer, step, in_buf, bytes);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, peer));
      // The send reads recv: it must be done before the reduction overwrites it.
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *out, peer));
      if (peer_v < v) {
        CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, recv, in_buf, recv, count));
      } else {
        CHORUS_RETURN_IF_ERROR(kernels::Reduce(dtype, op, recv, recv, in_buf, count));
      }
    }
    if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, recv, count, n));

    // Last step: hand the result back to the extra rank folded into us.
    if (r < 2 * extra) {
      const int partner = r - extra;
      transport::RequestPtr out = ctx.transport.Send(partner, ctx.tag(unfold_step), recv, bytes, ctx.fingerprint);
      return Wait(ctx, *out, partner);
    }
    return Status::Ok();
  });
}

}  // namespace chorus::algos
