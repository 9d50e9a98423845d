#include "algos/group.h"

#include <algorithm>

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

}  // namespace chorus::algos
