// What an algorithm gets to run one collective: the transport to reach peers, the
// tag space of this call (so concurrent calls never mix bytes), the fingerprint that
// every message of the call carries, the deadline, and where its scratch memory comes
// from (kept between calls, so that it is not page-faulted in again every time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer_cache.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/transport.h"

namespace chorus::algos {

using transport::CollectiveTag;  // the tag layout: transport/tag.h

// Host bounce buffers of device buffers that are filled and drained while the algorithm
// runs (chorus/staging_pipeline.h): the device-to-host copy of the input proceeds in
// segments and the results go back as soon as they are final, so both copies overlap
// the wire. An algorithm that streams (Streams() in collectives.h) touches an input
// range only after WaitInput returned OK for it, and reports every byte of its result
// final exactly once, after its last write there. Offsets are bytes: WaitInput's
// into the send buffer, OutputFinal's into the recv buffer (all_gather's own block
// is at rank * count there). Where the two alias (in place) an algorithm writes a
// range of recv only after it waited for the input there.
class StreamStaging {
 public:
  virtual ~StreamStaging() = default;
  // Optional, before the first WaitInput: the order in which the input will be read,
  // as (offset, bytes) ranges; it is brought to the host in that order (what it leaves
  // out, after, in address order). Without it: the first range waited for, then the
  // rest in address order.
  virtual void InputOrder(const std::vector<std::pair<size_t, size_t>>& ranges) { (void)ranges; }
  virtual Status WaitInput(size_t offset, size_t bytes) = 0;
  virtual void OutputFinal(size_t offset, size_t bytes) = 0;
};

struct Context {
  transport::Transport& transport;
  uint64_t seq;          // per-communicator sequence number of this collective
  uint64_t fingerprint;  // describes the call; peers must present the same one
  Deadline deadline;
  StreamStaging* staging = nullptr;  // set only where the buffers are streamed bounce buffers
  BufferCache* scratch = nullptr;    // the communicator's scratch memory (null: allocate)

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  uint64_t tag(uint32_t step) const { return CollectiveTag(seq, step); }
  BufferCache::Buffer Scratch(size_t bytes) const { return TakeBuffer(scratch, bytes); }
};

// The staging hooks, which cost nothing on plain host buffers.
inline Status InputReady(const Context& ctx, size_t offset, size_t bytes) {
  return ctx.staging != nullptr ? ctx.staging->WaitInput(offset, bytes) : Status::Ok();
}
inline void OutputFinal(const Context& ctx, size_t offset, size_t bytes) {
  if (ctx.staging != nullptr) ctx.staging->OutputFinal(offset, bytes);
}
// `ranges()` gives the (offset, bytes) list; it is called only where streamed.
template <typename Ranges>
void InputOrder(const Context& ctx, Ranges ranges) {
  if (ctx.staging != nullptr) ctx.staging->InputOrder(ranges());
}

// kMismatch: "rank <this> called <ctx.fingerprint> but rank <peer> called <remote>"
// (`describe` renders a fingerprint as text).
Status CallMismatch(const Context& ctx, int peer, uint64_t remote_fingerprint,
                    std::string (*describe)(uint64_t fingerprint));
// Waits for a request; turns a fingerprint mismatch into an error naming both calls
// (CallMismatch).
Status WaitRequest(const Context& ctx, transport::Request& req, int peer,
                   std::string (*describe)(uint64_t fingerprint));

}  // namespace chorus::algos
