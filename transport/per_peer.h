// One Transport made of several: each peer is reached through one of them (shared
// memory for the ranks of this host, TCP or RDMA for the others). Posts go to the
// peer's transport; releases, aborts and health concern all of them, so a failure on
// one side still reaches every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport {

class PerPeerTransport final : public Transport {
 public:
  // parts: the transports (each spans the whole world); route[peer]: the index of the
  // part that reaches it (this rank's own entry picks where self-sends go).
  PerPeerTransport(std::vector<std::unique_ptr<Transport>> parts, std::vector<int> route);
  ~PerPeerTransport() override;

  int rank() const override { return parts_[0]->rank(); }
  int size() const override { return static_cast<int>(route_.size()); }
  RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  void ReleaseTags(uint64_t first, uint64_t last) override;
  void Progress() override;
  void Abort(const Status& reason) override;
  Status health() override;
  std::string Describe() const override;
  TrafficCounters counters() const override;

 private:
  Transport& For(int peer);

  std::vector<std::unique_ptr<Transport>> parts_;
  std::vector<int> route_;
};

}  // namespace chorus::transport
