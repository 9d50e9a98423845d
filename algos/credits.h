// Credits: a receiver tells a sender that a receive is posted, so that a large message
// never arrives before it. A message that does is read into a buffer of the transport
// and copied again once its receive is posted (memory for all of it, and a second
// pass over its bytes); in a tree or at a root, where nothing paces a sender, a whole
// call's data could wait there.
//
// A credit is a 0-byte message from the receiver on the tag of the data it is for (the
// sender's messages to it): the transport matches messages per (peer, tag) in posting
// order, so a receiver that posts the receive of a credit before that of the data it
// precedes, and a sender that sends a credit before its data, keep them apart without
// a tag of their own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/context.h"
#include "algos/pending_sends.h"

namespace chorus::algos {

// Messages at least this large wait for their credit where an algorithm cannot post its
// receives before its peers may send (a late rank at a root, a tree's parent); smaller
// ones go at once (a credit costs a one-way latency when the receiver comes late).
constexpr size_t kCreditAtBytes = 256 << 10;

// How many of a tree's chunks of `chunk_bytes` go before their credit: `usual`, or none
// where some host runs more ranks than it has cores (Tuning::crowded_cores) and the
// chunks are large: there a peer a call behind would park them in its transport, to be
// copied again, and that copy costs more than the credit's round trip.
inline size_t UnaskedChunks(bool crowded_cores, size_t chunk_bytes, size_t usual) {
  return crowded_cores && chunk_bytes >= kCreditAtBytes ? 0 : usual;
}

// Sends the credit for one message to `peer` on ctx.tag(step).
inline void SendCredit(const Context& /*ctx*/, PendingSends& sends, int peer, uint32_t step) {
  sends.Post(peer, step, nullptr, 0);
}

// The credits a sender receives from one peer on one tag: message i (0, 1, ...) may go
// once credit i - `unasked` has arrived; the first `unasked` messages need none (the
// receiver posted their receives at its start).
class CreditsFrom {
 public:
  CreditsFrom(const Context& ctx, int peer, uint32_t step, size_t unasked)
      : ctx_(ctx), peer_(peer), step_(step), unasked_(unasked) {}

  // Posts the receive of the next credit (before the receive of data that follows it on
  // the same tag, where there is such data).
  void PostNext() { posted_.push_back(PostRecv(ctx_, peer_, step_, nullptr, 0)); }

  // Blocks until message i may be sent.
  Status Await(size_t i) { return Advance(i, /*block=*/true).status(); }
  // Whether message i may be sent now (without blocking).
  Result<bool> Test(size_t i) { return Advance(i, /*block=*/false); }

 private:
  Result<bool> Advance(size_t i, bool block) {
    while (i >= unasked_ && arrived_ <= i - unasked_) {
      if (posted_.empty()) PostNext();
      if (!block && !posted_.front()->Test()) return false;
      CHORUS_RETURN_IF_ERROR(Wait(ctx_, *posted_.front(), peer_));
      posted_.pop_front();
      ++arrived_;
    }
    return true;
  }

  const Context& ctx_;
  const int peer_;
  const uint32_t step_;
  const size_t unasked_;
  Fifo<transport::RequestPtr> posted_;  // not arrived yet
  size_t arrived_ = 0;
};

}  // namespace chorus::algos
