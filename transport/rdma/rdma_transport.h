// chorus's RDMA transport: one reliable-connected queue pair per peer on a verbs
// device (InfiniBand or RoCE, Soft-RoCE included), libibverbs loaded at run time.
// The protocols are in ctrl.h, the matching and failure rules in engine.h.
//
// Set-up is three-phase because queue-pair addresses go through the caller's bootstrap
// and a queue pair must be ready to receive before its peer sends:
//   auto t = RdmaTransport::Open(rank, size, comm_id, opts);   // publish t->address()
//   t->Connect(all_ranks_addresses, hosts);                      // then a barrier
//   t->Start(deadline);                                          // then Send/Recv
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/early_hold.h"
#include "transport/transport.h"

namespace chorus::transport {

namespace rdma {
class Engine;
}

struct RdmaOptions {
  std::string hca;       // "" (automatic), "dev" or "dev:port"
  int gid_index = -1;    // -1: automatic
  std::string local_ip;  // the address this rank reaches its peers from (GID choice)
  int64_t timeout_ms = 30 * 60 * 1000;
  uint32_t eager_bytes = 8192;
  int64_t poll_us = 0;                        // poll before sleeping (CHORUS_IB_POLL_US)
  int64_t peer_timeout_ms = 10000;            // a silent peer we wait for fails after this (CHORUS_PEER_TIMEOUT)
  uint64_t pause_above = kDefaultPauseAbove;  // early EAGER bytes held from one peer before it must send by RTS
  uint64_t resume_below = kDefaultResumeBelow;
};

class RdmaTransport final : public Transport {
 public:
  // Loads libibverbs, opens the device, creates the queue pairs. kUnavailable (with
  // the reason: no library, no device, no active port) where RDMA cannot be used.
  static Result<std::unique_ptr<RdmaTransport>> Open(int rank, int size, uint64_t comm_id, const RdmaOptions& opts);
  ~RdmaTransport() override;

  // This rank's queue-pair addresses, one line of text to publish.
  const std::string& address() const { return address_; }
  // Connects each queue pair to the peer's (`addresses` indexed by rank, `hosts` for
  // error messages). Every rank must have connected before any rank Starts.
  Status Connect(const std::vector<std::string>& addresses, const std::vector<std::string>& hosts);
  // Starts the engine and checks every connection with a HELLO (comm id, rank, size).
  Status Start(Deadline deadline);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  void ReleaseTags(uint64_t first, uint64_t last) override;
  void Abort(const Status& reason) override;
  Status health() override;
  std::string Describe() const override;
  TrafficCounters counters() const override;

 private:
  RdmaTransport(int rank, int size);
  RequestPtr Post(bool send, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);

  const int rank_;
  const int size_;
  std::string address_;
  std::unique_ptr<rdma::Engine> engine_;
  bool started_ = false;
  Status pre_start_error_;  // Abort before Start
};

}  // namespace chorus::transport
