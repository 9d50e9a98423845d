#include "algos/barrier.h"

#include "algos/fingerprint.h"

namespace chorus::algos {

Status Barrier(const Context& ctx) {
  const int n = ctx.size();
  const int r = ctx.rank();
  uint32_t step = 0;
  for (int dist = 1; dist < n; dist <<= 1, ++step) {
    const int to = (r + dist) % n;
    const int from = (r - dist + n) % n;
    // Round `step`: an empty message to rank+dist, one expected from rank-dist.
    transport::RequestPtr recv = ctx.transport.Recv(from, ctx.tag(step), nullptr, 0, ctx.fingerprint);
    transport::RequestPtr send = ctx.transport.Send(to, ctx.tag(step), nullptr, 0, ctx.fingerprint);
    CHORUS_RETURN_IF_ERROR(WaitRequest(ctx, *send, to, DescribeFingerprint));
    CHORUS_RETURN_IF_ERROR(WaitRequest(ctx, *recv, from, DescribeFingerprint));
  }
  return Status::Ok();
}

}  // namespace chorus::algos
