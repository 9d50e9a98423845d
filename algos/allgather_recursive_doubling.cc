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
// from the send buffer, so that the local copy into recv overlaps it.
//
// On streamed device stand-ins (ctx.staging) our block is waited for before it is sent,
// reported final once it is in recv, and every received group as it lands.
#include <vector>

#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"

namespace chorus::algos {

Status AllGatherRecursiveDoubling(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if ((n & (n - 1)) != 0) {
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
    for (int d = 1, k = 0; d < n; d *= 2, ++k) {
      const int partner = r ^ d;
      in.push_back(PostRecv(ctx, partner, static_cast<uint32_t>(k), out + group(partner, d) * block, d * block));
    }
    // Step 0: our block, from the send buffer; then our copy of it.
    sends.Post(r ^ 1, 0, send, block);
    CopyMovingBytes(ctx, out + r * block, send, block);
    OutputFinal(ctx, r * block, block);
    for (int d = 1, k = 0; d < n; d *= 2, ++k) {
      const int partner = r ^ d;
      // Step k+1 sends what we hold after step k: our group of 2d blocks, which starts
      // at the lower of the two groups of step k.
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in[k], partner));
      OutputFinal(ctx, group(partner, d) * block, d * block);
      if (2 * d < n) {
        sends.Post(r ^ (2 * d), static_cast<uint32_t>(k + 1), out + group(r, 2 * d) * block, 2 * d * block);
      }
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
