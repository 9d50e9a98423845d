// What an algorithm gets to run one collective: the transport to reach peers, the
// tag space of this call (so concurrent calls never mix bytes), the fingerprint that
// every message of the call carries, and the deadline.
#pragma once

#include <cstdint>
#include <string>

#include "chorus/deadline.h"
#include "chorus/status.h"
#include "transport/transport.h"

namespace chorus::algos {

// Tags: bit 63 set marks a collective (user point-to-point tags are 32-bit, below);
// bits 16..47 hold the call's sequence number, bits 0..15 the step within the call.
inline uint64_t CollectiveTag(uint64_t seq, uint32_t step) {
  return (uint64_t{1} << 63) | ((seq & 0xffffffffull) << 16) | (step & 0xffffu);
}

struct Context {
  transport::Transport& transport;
  uint64_t seq;            // per-communicator sequence number of this collective
  uint64_t fingerprint;    // describes the call; peers must present the same one
  Deadline deadline;

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  uint64_t tag(uint32_t step) const { return CollectiveTag(seq, step); }
};

// Waits for a request; turns a fingerprint mismatch into an error naming both calls
// (via `describe`, which renders a fingerprint as text).
Status WaitRequest(const Context& ctx, transport::Request& req, int peer,
                   std::string (*describe)(uint64_t fingerprint));

}  // namespace chorus::algos
