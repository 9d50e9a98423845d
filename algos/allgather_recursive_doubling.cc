// All-gather by recursive doubling, for a power-of-two number of ranks n. recv holds
// n blocks of `count` elements, rank i's at i*count. With steps k = 0 .. log2(n)-1 and
// distance d = 2^k, rank r holds before step k the d blocks of its group, [r & ~(d-1),
// +d), and
//   sends them to r ^ d (one message: the blocks are contiguous in recv),
//   receives r ^ d's group, the d blocks next to ours, straight into recv;
// after the last step it holds all n. log2(n) steps instead of the ring's n-1, for the
// same bytes per rank ((n-1)/n of the output in, as much out): fewer rounds of
// latency and of waiting for a peer to be scheduled.
//
// Every receive is posted up front (disjoint ranges of recv), so nothing waits in the
// transport for its receive while this rank is in the call. Step 0 sends our block
// from the send buffer, so that the local copy into recv overlaps it. A step's message
// of kCreditAtBytes and more goes once the partner's credit says its receive is posted
// (credits.h: a partner still in the previous call would otherwise have it copied
// twice); every credit goes at the start.
//
// On streamed bounce buffers (ctx.staging) our block is waited for before it is sent,
// reported final once it is in recv, and every received group as it lands.
#include <memory>
#include <vector>

#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/credits.h"
#include "algos/pending_sends.h"

namespace chorus::algos {

Status AllGatherRecursiveDoubling(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (!IsPowerOfTwo(n)) {
    return InvalidArgument("all_gather by recursive doubling needs a power-of-two number of ranks, not " +
                           std::to_string(n));
  }
  const size_t es = DataTypeSize(dtype);
  const size_t block = count * es;
  CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, block));
  if (n == 1) {
    CopyIfDistinct(recv, send, block);
    OutputFinal(ctx, 0, block);
    return Status::Ok();
  }
  // The first block of the group of d ranks that `rank` belongs to.
  const auto group = [](int rank, int d) { return static_cast<size_t>(rank & ~(d - 1)); };
  char* out = static_cast<char*>(recv);

  // Receives are posted into recv: on failure the transport lets go of them before
  // this returns (AbortOnError).
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::vector<transport::RequestPtr> in;
    std::vector<std::unique_ptr<CreditsFrom>> credits;  // step k's, where its message is large
    for (int d = 1, k = 0; d < n; d *= 2, ++k) {
      const int partner = r ^ d;
      credits.emplace_back(d * block >= kCreditAtBytes ? std::make_unique<CreditsFrom>(ctx, partner, k, 0) : nullptr);
      if (credits.back()) credits.back()->PostNext();  // its receive before the data's, on the same tag
      in.push_back(PostRecv(ctx, partner, static_cast<uint32_t>(k), out + group(partner, d) * block, d * block));
    }
    for (int d = 1, k = 0; d < n; d *= 2, ++k) {
      if (credits[k]) SendCredit(ctx, sends, r ^ d, static_cast<uint32_t>(k));
    }
    // Step k's send, once its credit (if any) came.
    auto post = [&](int k, const void* from, size_t bytes) -> Status {
      if (credits[k]) CHORUS_RETURN_IF_ERROR(credits[k]->Await(0));
      sends.Post(r ^ (1 << k), static_cast<uint32_t>(k), from, bytes);
      return Status::Ok();
    };
    // Step 0: our block, from the send buffer, and our copy of it (first where the send
    // waits for a credit).
    if (!credits[0]) CHORUS_RETURN_IF_ERROR(post(0, send, block));
    CopyMovingBytes(ctx, out + r * block, send, block);
    OutputFinal(ctx, r * block, block);
    if (credits[0]) CHORUS_RETURN_IF_ERROR(post(0, send, block));
    for (int d = 1, k = 0; d < n; d *= 2, ++k) {
      // Step k+1 sends what we hold after step k: our group of 2d blocks, which starts
      // at the lower of the two groups of step k.
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in[k], r ^ d));
      OutputFinal(ctx, group(r ^ d, d) * block, d * block);
      if (2 * d < n) CHORUS_RETURN_IF_ERROR(post(k + 1, out + group(r, 2 * d) * block, 2 * d * block));
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
