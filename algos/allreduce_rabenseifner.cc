// Rabenseifner all-reduce: a reduce-scatter by recursive halving, then an all-gather
// by recursive doubling, among p ranks, p the largest power of two <= n. 2 log2(p)
// steps like recursive doubling's log2(p) pairs, but each rank sends 2(p-1)/p of the
// buffer in all, as the ring does.
//
// The buffer is cut into p blocks (EvenBlock); a rank's "range" is a run of blocks,
// at first all p. With L = log2 p and v this rank's virtual rank:
//   step 0             extra rank i (i < e = n - p) sends its whole vector to rank
//                      e + i, which reduces it in (as recursive doubling folds);
//   steps 1..L         reduce-scatter: at step k+1 swap half of the range with
//                      v ^ (p >> (k+1)): keep the lower half if that bit of v is
//                      clear, else the upper; reduce the half received into the kept
//                      one. After step L rank v holds block v, complete;
//   steps L+1..2L      all-gather, the same partners in reverse: send the range
//                      held, receive the partner's (as large), which is next to it;
//   step 2L+1          rank e + i sends the result to extra rank i.
// Every block is reduced on one rank only, so all ranks hold the same bits; the
// operands are still ordered by rank (lower first), as in recursive doubling.
//
// recv is the accumulator; until the first reduction lands there, our own data is
// read from send, so an out-of-place call copies nothing. A half sent is disjoint
// from the half kept, so sends and reductions never touch the same bytes.
#include <algorithm>
#include <cstdint>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"
#include "kernels/reduce.h"

namespace chorus::algos {

Status AllReduceRabenseifner(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                             ReduceOp op) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t es = DataTypeSize(dtype);
  const size_t bytes = count * es;
  if (n == 1) return CopyAlone(ctx, send, recv, bytes);

  const PowerOfTwoFold fold = FoldOf(n);
  const int p = fold.p, rounds = fold.rounds, extra = fold.extra;
  const uint32_t unfold_step = static_cast<uint32_t>(2 * rounds + 1);
  // Blocks [lo, hi) of the p, in elements.
  const auto range = [&](int lo, int hi) {
    const size_t begin = EvenBlock(count, p, lo).offset;
    const Span last = EvenBlock(count, p, hi - 1);
    return Span{begin, last.offset + last.count - begin};
  };

  return AbortOnError(ctx, [&]() -> Status {
    // Step 0: extra ranks hand their data over and wait for the result.
    if (r < extra) return FoldOut(ctx, r + extra, send, recv, bytes, unfold_step);
    // Received halves land here before they are reduced: at most half the buffer, or
    // all of it where an extra rank folds in.
    const bool folds_in = r < 2 * extra;
    BufferCache::Buffer scratch = ctx.Scratch(folds_in ? bytes : range(0, p / 2).count * es);
    const void* mine = send;  // where our partial result is: send until recv holds it
    if (folds_in) {
      const int partner = r - extra;
      transport::RequestPtr in = PostRecv(ctx, partner, 0, scratch.data(), bytes);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, partner));
      // The extra rank is the lower one: its data is the left operand.
      CHORUS_RETURN_IF_ERROR(ReduceMovingBytes(ctx, dtype, op, recv, scratch.data(), send, count));
      mine = recv;
    }

    // Steps 1..rounds: reduce-scatter by recursive halving.
    const int v = r - extra;
    int lo = 0, hi = p;  // the blocks this rank still reduces
    for (int k = 0; k < rounds; ++k) {
      const int mask = p >> (k + 1);
      const int peer_v = v ^ mask;
      const int peer = peer_v + extra;
      const uint32_t step = static_cast<uint32_t>(k + 1);
      const int mid = lo + (hi - lo) / 2;
      const bool upper = (v & mask) != 0;
      const Span keep = upper ? range(mid, hi) : range(lo, mid);
      const Span give = upper ? range(lo, mid) : range(mid, hi);
      transport::RequestPtr in = PostRecv(ctx, peer, step, scratch.data(), keep.count * es);
      transport::RequestPtr out =
          ctx.transport.Send(peer, ctx.tag(step), At(mine, give.offset, es), give.count * es, ctx.fingerprint);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, peer));
      // Lower virtual rank first (the partial sums cover rank ranges in that order).
      const void* left = peer_v < v ? scratch.data() : At(mine, keep.offset, es);
      const void* right = peer_v < v ? At(mine, keep.offset, es) : scratch.data();
      CHORUS_RETURN_IF_ERROR(ReduceMovingBytes(ctx, dtype, op, At(recv, keep.offset, es), left, right, keep.count));
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *out, peer));
      mine = recv;
      lo = upper ? mid : lo;
      hi = upper ? hi : mid;
    }
    // Block v is complete: AVG divides here, once, before the all-gather spreads it.
    const Span own = range(lo, hi);
    if (op == ReduceOp::kAvg) {
      CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, At(recv, own.offset, es), own.count, n));
    }

    // Steps rounds+1..2 rounds: all-gather by recursive doubling, partners in reverse.
    for (int k = rounds - 1; k >= 0; --k) {
      const int mask = p >> (k + 1);
      const int peer_v = v ^ mask;
      const int peer = peer_v + extra;
      const uint32_t step = static_cast<uint32_t>(2 * rounds - k);
      const int width = hi - lo;
      const int peer_lo = (v & mask) != 0 ? lo - width : hi;
      const Span held = range(lo, hi);
      const Span theirs = range(peer_lo, peer_lo + width);
      transport::RequestPtr in = PostRecv(ctx, peer, step, At(recv, theirs.offset, es), theirs.count * es);
      transport::RequestPtr out =
          ctx.transport.Send(peer, ctx.tag(step), At(recv, held.offset, es), held.count * es, ctx.fingerprint);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, peer));
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *out, peer));
      lo = std::min(lo, peer_lo);
      hi = lo + 2 * width;
    }

    // Last step: hand the result back to the extra rank folded into us.
    if (folds_in) {
      const int partner = r - extra;
      transport::RequestPtr out = ctx.transport.Send(partner, ctx.tag(unfold_step), recv, bytes, ctx.fingerprint);
      return Wait(ctx, *out, partner);
    }
    return Status::Ok();
  });
}

}  // namespace chorus::algos
