#include "algos/group.h"

#include <algorithm>
#include <string>

namespace chorus::algos {

GroupTransport::GroupTransport(transport::Transport& parent, std::vector<int> members)
    : parent_(parent), members_(std::move(members)) {
  auto it = std::find(members_.begin(), members_.end(), parent_.rank());
  rank_ = it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

// A peer outside the group becomes parent rank -1, which the parent refuses naming it.
transport::RequestPtr GroupTransport::Send(int peer, uint64_t tag, const void* buf, size_t bytes,
                                           uint64_t fingerprint) {
  return parent_.Send(Parent(peer), tag, buf, bytes, fingerprint);
}

transport::RequestPtr GroupTransport::Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  return parent_.Recv(Parent(peer), tag, buf, bytes, fingerprint);
}

std::string GroupTransport::Describe() const {
  return "group of " + std::to_string(members_.size()) + " in " + parent_.Describe();
}

Status CheckTopology(const Context& ctx, const Topology& topo, const std::string& what) {
  if (topo.size() != ctx.size()) {
    return InvalidArgument("hierarchical " + what + " on " + std::to_string(ctx.size()) +
                           " ranks, but the topology has " + std::to_string(topo.size()));
  }
  return Status::Ok();
}

Status CheckTopology(const Context& ctx, const Topology& topo, const std::string& what, int root) {
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, what));
  if (root < 0 || root >= ctx.size()) {
    return InvalidArgument(what + ": root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(ctx.size()));
  }
  return Status::Ok();
}

}  // namespace chorus::algos
