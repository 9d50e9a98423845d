// Agreement on a rooted call (broadcast, reduce, gather, scatter) before it runs.
//
// The fingerprint on every message catches ranks that disagree only where one receives
// from another; a rooted collective's ranks may never exchange a message with the rank
// that disagrees (roots 0 and 1: both send, nobody receives), so without this check they
// return OK with different data, or wait for the deadline. Here every rank learns the
// smallest and largest fingerprint of the call (a dissemination all-reduce of min/max,
// ceil(log2 n) rounds of tiny messages); where they differ every rank returns kMismatch
// naming two of the calls, before any of the collective's messages is sent.
// docs/design/root_agreement.md.
#pragma once

#include "algos/context.h"

namespace chorus::algos {

// OK where every rank of the world called with ctx.fingerprint; otherwise kMismatch on
// every rank ("rank 2 called broadcast(...) but rank 0 called broadcast(...)"). Uses the
// top tag steps of ctx's call (kAgreementFirstStep and up).
Status AgreeOnCall(const Context& ctx);

// A broadcast in the agreement's own rounds, for small messages (selector.h:
// kAgreedBroadcastMaxBytes): each round's message carries the root's data where its
// sender holds it and its receiver does not, so after the ceil(log2 n) rounds every
// rank both knows the call agreed and holds the data. `buf` is written only then; on
// kMismatch (as AgreeOnCall's) it is left as it was on every rank. Run without a
// separate AgreeOnCall. On two ranks it needs no scratch: the root's message lands in
// the other's buffer only where both made this call. `send`: the root's input where it
// is not `buf` (out of place), else null.
Status BroadcastAgreed(const Context& ctx, void* buf, size_t count, DataType dtype, int root,
                       const void* send = nullptr);

// The first tag step the agreement uses: the collective's own steps that reach this
// high (chunk indices wrapping) are kept apart by FIFO per (peer, tag), because the
// agreement's messages are posted first on both sides.
constexpr uint32_t kAgreementSteps = 64;
constexpr uint32_t kAgreementFirstStep = transport::kMaxTagStep + 1 - kAgreementSteps;

}  // namespace chorus::algos
