#include "algos/agreement.h"

#include <string>

#include "algos/fingerprint.h"
#include "algos/pending_sends.h"

namespace chorus::algos {
namespace {

// What a rank knows of the call's fingerprints: the smallest and the largest seen so
// far, each with a rank that called it. Min and max do not mind hearing a rank twice,
// which dissemination does where n is not a power of two.
struct Known {
  uint64_t min_fp;
  uint64_t max_fp;
  int32_t min_rank;
  int32_t max_rank;
};

void Learn(Known& k, uint64_t fp, int32_t rank) {
  if (fp < k.min_fp) k = Known{fp, k.max_fp, rank, k.max_rank};
  if (fp > k.max_fp) k = Known{k.min_fp, fp, k.min_rank, rank};
}

// The dissemination all-reduce of `known` (min and max). Fails only where the transport
// does; a peer that called something else is learnt, not an error.
Status Disseminate(const Context& ctx, Known& known) {
  const int n = ctx.size(), r = ctx.rank();
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist <<= 1, ++round) {
    const int to = (r + dist) % n, from = (r - dist + n) % n;
    const uint64_t tag = ctx.tag(kAgreementFirstStep + round);
    const Known out = known;
    Known in{};
    // Round k: what this rank knows goes to rank+2^k, what rank-2^k knows comes in, both
    // with the call's fingerprint (the collective's own later messages carry it too).
    transport::RequestPtr recv = ctx.transport.Recv(from, tag, &in, sizeof in, ctx.fingerprint);
    transport::RequestPtr send = ctx.transport.Send(to, tag, &out, sizeof out, ctx.fingerprint);
    Status got = recv->Wait(ctx.deadline);
    // rank-2^k called another call (the transport compared the fingerprints): its
    // record never arrives, its call is enough to know.
    if (got.code() == StatusCode::kMismatch && recv->remote_fingerprint() != 0) {
      Learn(known, recv->remote_fingerprint(), from);
    } else if (!got.ok()) {
      return got;
    } else {
      Learn(known, in.min_fp, in.min_rank);
      Learn(known, in.max_fp, in.max_rank);
    }
    CHORUS_RETURN_IF_ERROR(send->Wait(ctx.deadline));
  }
  return Status::Ok();
}

// A dissemination barrier of empty messages without a fingerprint: once a rank is past
// it, every rank has finished Disseminate. The API aborts the transport after a failed
// call, and that abort would otherwise fail a peer still in Disseminate with kPeerFailed
// instead of its own kMismatch. Its errors (that abort, reaching a peer still here) change
// nothing: the call's outcome is known.
void AllKnow(const Context& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist <<= 1, ++round) {
    const uint64_t tag = ctx.tag(kAgreementFirstStep + kAgreementSteps / 2 + round);
    // Round k: an empty message to rank+2^k, one expected from rank-2^k.
    transport::RequestPtr recv = ctx.transport.Recv((r - dist + n) % n, tag, nullptr, 0);
    transport::RequestPtr send = ctx.transport.Send((r + dist) % n, tag, nullptr, 0);
    if (!recv->Wait(ctx.deadline).ok() || !send->Wait(ctx.deadline).ok()) return;
  }
}

}  // namespace

Status AgreeOnCall(const Context& ctx) {
  const int r = ctx.rank();
  Known known{ctx.fingerprint, ctx.fingerprint, r, r};
  // The records are on this stack: a failed round aborts before they go.
  CHORUS_RETURN_IF_ERROR(AbortOnError(ctx, [&] { return Disseminate(ctx, known); }));
  if (known.min_fp == known.max_fp) return Status::Ok();
  AllKnow(ctx);
  // Name this rank's call and one that differs from it.
  const bool other_is_min = known.min_fp != ctx.fingerprint;
  return CallMismatch(ctx, other_is_min ? known.min_rank : known.max_rank, other_is_min ? known.min_fp : known.max_fp,
                      DescribeFingerprint);
}

}  // namespace chorus::algos
