#include "algos/agreement.h"

#include <cstring>
#include <string>

#include "algos/buffer.h"
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

// A broadcast's data riding the rounds (BroadcastAgreed). Each message is the sender's
// Known, followed by the data where the sender holds it and the receiver does not
// (Carries): its size says which, and both ends know it from the root.
struct Carried {
  int root;
  size_t bytes;
  char* out;  // sizeof(Known) + bytes: what this rank sends, then the data once it holds it
  char* in;   // the same: what it receives
};

// Whether `rank` holds the data before round `round`: round k takes it from every
// holder to holder + 2^k, so the holders are the root and the 2^round - 1 ranks after it.
bool Holds(const Carried& d, int rank, int n, uint32_t round) {
  return static_cast<uint64_t>((rank - d.root + n) % n) < (uint64_t{1} << round);
}
bool Carries(const Carried* d, int from, int to, int n, uint32_t round) {
  return d != nullptr && Holds(*d, from, n, round) && !Holds(*d, to, n, round);
}

// Waits for a round's receive from `from` and its send. `from` may have called another
// call (the transport compared the fingerprints, or the sizes that follow from them):
// its record never arrives, its call is enough to know, so it goes into `known` and
// *learnt is set. A size mismatch under this call's own fingerprint is a fault.
Status FinishRound(const Context& ctx, transport::Request& recv, transport::Request& send, int from, Known& known,
                   bool* learnt) {
  Status got = recv.Wait(ctx.deadline);
  const uint64_t remote = recv.remote_fingerprint();
  *learnt = got.code() == StatusCode::kMismatch && remote != 0 && remote != ctx.fingerprint;
  if (!got.ok() && !*learnt) return got;
  CHORUS_RETURN_IF_ERROR(send.Wait(ctx.deadline));
  if (*learnt) Learn(known, remote, from);
  return Status::Ok();
}

// The dissemination all-reduce of `known` (min and max), with `data` where not null.
// Fails only where the transport does; a peer that called something else is learnt, not
// an error.
Status Disseminate(const Context& ctx, Known& known, const Carried* data) {
  const int n = ctx.size(), r = ctx.rank();
  char own_out[sizeof(Known)], own_in[sizeof(Known)];
  char* const out = data != nullptr ? data->out : own_out;
  char* const in = data != nullptr ? data->in : own_in;
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist <<= 1, ++round) {
    const int to = (r + dist) % n, from = (r - dist + n) % n;
    const uint64_t tag = ctx.tag(kAgreementFirstStep + round);
    const bool sends = Carries(data, r, to, n, round), gets = Carries(data, from, r, n, round);
    std::memcpy(out, &known, sizeof known);
    // Round k: what this rank knows goes to rank+2^k, what rank-2^k knows comes in, both
    // with the call's fingerprint (the collective's own later messages carry it too).
    transport::RequestPtr recv =
        ctx.transport.Recv(from, tag, in, sizeof(Known) + (gets ? data->bytes : 0), ctx.fingerprint);
    transport::RequestPtr send =
        ctx.transport.Send(to, tag, out, sizeof(Known) + (sends ? data->bytes : 0), ctx.fingerprint);
    bool learnt = false;
    CHORUS_RETURN_IF_ERROR(FinishRound(ctx, *recv, *send, from, known, &learnt));
    if (learnt) continue;
    Known heard{};
    std::memcpy(&heard, in, sizeof heard);
    Learn(known, heard.min_fp, heard.min_rank);
    Learn(known, heard.max_fp, heard.max_rank);
    // Kept apart from the user's buffer until the whole world is known to agree.
    if (gets && data->bytes > 0) std::memcpy(out + sizeof(Known), in + sizeof(Known), data->bytes);
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

// After a Disseminate that learnt a mismatch: kMismatch naming this rank's call and one
// that differs from it, once every rank knows.
Status Disagreed(const Context& ctx, const Known& known) {
  AllKnow(ctx);
  const bool other_is_min = known.min_fp != ctx.fingerprint;
  return CallMismatch(ctx, other_is_min ? known.min_rank : known.max_rank, other_is_min ? known.min_fp : known.max_fp,
                      DescribeFingerprint);
}

// BroadcastAgreed on two ranks: the root's data goes straight into the other rank's
// buffer, and that rank's record back. A transport writes a message into a receive only
// where their fingerprints match, that is where both ranks made this call: the data is
// the agreement for its receiver, as the record is for the root. No scratch, no copies;
// out of place the root sends its input and copies it into its output meanwhile.
Status BroadcastPair(const Context& ctx, const void* send, void* buf, size_t bytes, int root) {
  const int r = ctx.rank(), peer = 1 - r;
  const uint64_t tag = ctx.tag(kAgreementFirstStep);
  Known known{ctx.fingerprint, ctx.fingerprint, r, r};
  const Known mine = known;
  Known heard{};
  const bool is_root = r == root;
  CHORUS_RETURN_IF_ERROR(AbortOnError(ctx, [&]() -> Status {
    transport::RequestPtr recv = is_root ? ctx.transport.Recv(peer, tag, &heard, sizeof heard, ctx.fingerprint)
                                         : ctx.transport.Recv(peer, tag, buf, bytes, ctx.fingerprint);
    if (is_root) CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, bytes));
    const void* from = is_root && send != nullptr ? send : buf;
    transport::RequestPtr out = is_root ? ctx.transport.Send(peer, tag, from, bytes, ctx.fingerprint)
                                        : ctx.transport.Send(peer, tag, &mine, sizeof mine, ctx.fingerprint);
    if (is_root) CopyIfDistinct(buf, from, bytes);
    bool learnt = false;
    CHORUS_RETURN_IF_ERROR(FinishRound(ctx, *recv, *out, peer, known, &learnt));
    if (!learnt && is_root) {
      Learn(known, heard.min_fp, heard.min_rank);
      Learn(known, heard.max_fp, heard.max_rank);
    }
    return Status::Ok();
  }));
  if (known.min_fp != known.max_fp) return Disagreed(ctx, known);
  return Status::Ok();
}

}  // namespace

Status AgreeOnCall(const Context& ctx) {
  const int r = ctx.rank();
  Known known{ctx.fingerprint, ctx.fingerprint, r, r};
  // The records are on this stack: a failed round aborts before they go.
  CHORUS_RETURN_IF_ERROR(AbortOnError(ctx, [&] { return Disseminate(ctx, known, nullptr); }));
  if (known.min_fp == known.max_fp) return Status::Ok();
  return Disagreed(ctx, known);
}

Status BroadcastAgreed(const Context& ctx, void* buf, size_t count, DataType dtype, int root, const void* send) {
  const int n = ctx.size(), r = ctx.rank();
  if (root < 0 || root >= n) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(n));
  }
  const size_t bytes = count * DataTypeSize(dtype);
  if (n == 2) return BroadcastPair(ctx, send, buf, bytes, root);
  if (r == root && send != nullptr && send != buf) {
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, bytes));
    CopyIfDistinct(buf, send, bytes);
  }
  // Outlives the rounds: a failed round aborts before it goes back to the cache.
  BufferCache::Buffer scratch = ctx.Scratch(2 * (sizeof(Known) + bytes));
  const Carried data{root, bytes, scratch.data(), scratch.data() + sizeof(Known) + bytes};
  if (r == root && bytes > 0) std::memcpy(data.out + sizeof(Known), buf, bytes);
  Known known{ctx.fingerprint, ctx.fingerprint, r, r};
  CHORUS_RETURN_IF_ERROR(AbortOnError(ctx, [&] { return Disseminate(ctx, known, &data); }));
  if (known.min_fp != known.max_fp) return Disagreed(ctx, known);
  // Every rank made this call, so every rank holds the root's data (2^rounds >= n).
  if (r != root && bytes > 0) std::memcpy(buf, data.out + sizeof(Known), bytes);
  return Status::Ok();
}

}  // namespace chorus::algos
