// n TCP transports in one process, connected over loopback (or shared-memory ones:
// CreateShm), one thread per rank for
// each collective: the algorithms run exactly as they do across processes, through
// the real transport and its wire protocol, but a test can drive thousands of calls
// quickly and check every rank's buffers directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "algos/context.h"
#include "common/buffer_cache.h"
#include "common/status.h"
#include "tests/util/slowdown.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace chorus::testing {

class TcpWorld {
 public:
  // Listens and connects n transports on 127.0.0.1; fails with the transport's error.
  // Each rank's algorithms take their scratch from a cache of its own, as in a
  // communicator (scratch_cache_bytes as CHORUS_SCRATCH_CACHE).
  // `base`: transport options (bind address aside) for every rank.
  static Result<std::unique_ptr<TcpWorld>> Create(int n, size_t scratch_cache_bytes = size_t{256} << 20,
                                                  const transport::TcpOptions& base = transport::TcpOptions());
  // The same over shared memory (every rank on this host), its large messages read
  // from the sender's memory or, without single_copy, streamed through the rings.
  static Result<std::unique_ptr<TcpWorld>> CreateShm(int n, size_t scratch_cache_bytes = size_t{256} << 20,
                                                     bool single_copy = false);
  ~TcpWorld();

  int size() const { return static_cast<int>(transports_.size()); }
  transport::Transport& transport(int rank) { return *transports_[static_cast<size_t>(rank)]; }
  BufferCache& scratch(int rank) { return *scratch_[static_cast<size_t>(rank)]; }

  // Runs body(rank, ctx) on one thread per rank. Every rank gets the same fresh
  // sequence number, fingerprint(rank) and a deadline `deadline_ms` from now (by
  // default 30 s, scaled for a sanitizer build: tests/util/slowdown.h). A rank
  // whose body fails aborts its transport, as the communicator does, so that its
  // peers fail promptly instead of waiting for their deadline. Returns each rank's
  // status.
  std::vector<Status> Run(const std::function<uint64_t(int rank)>& fingerprint,
                          const std::function<Status(int rank, const algos::Context& ctx)>& body,
                          int64_t deadline_ms = 30000 * kSlowdown);

  // Reserves k sequence numbers that no Run will use, for bodies that run several
  // collectives at once (each needs its own tag space); returns the first.
  uint64_t ReserveSeqs(uint64_t k) {
    const uint64_t first = seq_;
    seq_ += k;
    return first;
  }

 private:
  TcpWorld() = default;
  std::vector<std::unique_ptr<BufferCache>> scratch_;  // outlives the transports
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  uint64_t seq_ = 0;
};

}  // namespace chorus::testing
