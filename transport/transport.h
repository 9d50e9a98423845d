// The narrow interface every algorithm uses to move bytes: post a send or a receive
// to a peer, get a Request, wait on it. One Transport per communicator; it owns the
// connections to every peer and the progress engine that drives them.
//
// Matching: the n-th Recv posted for (peer, tag) receives the n-th message that peer
// sent with that tag. Sizes must agree exactly; a mismatch fails the Recv with an
// error naming both ranks and both sizes. A message may carry a 64-bit fingerprint
// (the algorithms' description of the call); a Recv that expects a different one
// fails with kMismatch and exposes the remote fingerprint. Tags form groups (one
// collective call each; tag.h): once a Recv with a non-zero fingerprint is posted for
// a group, any message of that group from the same peer with another
// fingerprint fails the group's Recvs with kMismatch, so ranks that called different
// collectives get an error even when their schedules never exchange the same tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "common/types.h"
#include "transport/tag.h"

namespace chorus::transport {

// One posted send or receive. Created by a Transport; completed by its engine.
class Request {
 public:
  virtual ~Request() = default;
  // True once the operation finished, successfully or not. Never blocks.
  virtual bool Test() = 0;
  // Blocks until finished or until the deadline. On deadline the request is still
  // posted: the caller must Abort the transport before reusing the buffer.
  virtual Status Wait(Deadline deadline) = 0;
  // The final status; valid once Test() is true.
  virtual Status status() = 0;
  // For a Recv that failed with kMismatch: the fingerprint the sender attached.
  virtual uint64_t remote_fingerprint() = 0;
};
using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Posts a send of `bytes` bytes at `buf` (which must stay valid until the request
  // completes). Sending to oneself is allowed and matches a Recv from oneself.
  virtual RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) = 0;
  // Posts a receive into `buf`, which must stay valid until the request completes.
  virtual RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) = 0;
  // Promises that no message with a tag in [first, last] will be sent or received
  // again (a finished collective's tags), so the transport may forget their matching
  // state. Tags with pending messages are kept.
  virtual void ReleaseTags(uint64_t first, uint64_t last) = 0;
  // Moves queued bytes without blocking, where the transport is driven by the threads
  // that use it (TCP with application progress); elsewhere nothing. For algorithms
  // that compute for a while between waits.
  virtual void Progress() {}
  // Fails every posted and future request with `reason`, tells connected peers
  // (they fail their requests with a message naming this rank and the reason), and
  // returns only after the engine stopped touching user buffers. Idempotent.
  virtual void Abort(const Status& reason) = 0;
  // The first error that broke this transport, or OK.
  virtual Status health() = 0;
  // A one-line description for logs ("tcp/io_uring, 2 sockets per peer, ...").
  virtual std::string Describe() const = 0;
  // Counted since creation; safe to call from any thread.
  virtual TrafficCounters counters() const { return {}; }
};

}  // namespace chorus::transport
