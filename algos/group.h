// A subset of a communicator's ranks seen as a world of its own, so that the flat
// algorithms run within a host or across hosts: rank i of the group is members[i] of
// the parent. Messages keep the call's tags and fingerprint; the phases of one call
// that reuse a pair of ranks stay apart because each (peer, tag) is matched in order.
#pragma once

#include <string>
#include <vector>

#include "algos/context.h"
#include "algos/topology.h"
#include "common/status.h"
#include "transport/transport.h"

namespace chorus::algos {

class GroupTransport final : public transport::Transport {
 public:
  // members: parent ranks, this rank among them.
  GroupTransport(transport::Transport& parent, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  transport::RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  transport::RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  void ReleaseTags(uint64_t first, uint64_t last) override { parent_.ReleaseTags(first, last); }
  void Progress() override { parent_.Progress(); }
  void Abort(const Status& reason) override { parent_.Abort(reason); }
  Status health() override { return parent_.health(); }
  std::string Describe() const override;
  TrafficCounters counters() const override { return parent_.counters(); }

 private:
  int Parent(int peer) const { return peer >= 0 && peer < size() ? members_[peer] : -1; }

  transport::Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

// A hierarchical `what` ("all_reduce") can run: the topology is this world's, and a
// rooted call's root is one of its ranks.
Status CheckTopology(const Context& ctx, const Topology& topo, const std::string& what);
Status CheckTopology(const Context& ctx, const Topology& topo, const std::string& what, int root);

// The call's context for the ranks of `group` alone (the hierarchical algorithms' steps).
inline Context Within(const Context& ctx, GroupTransport& group) {
  return Context{group, ctx.seq, ctx.fingerprint, ctx.deadline, nullptr, ctx.scratch};
}

}  // namespace chorus::algos
