#include "transport/matching.h"

#include <algorithm>
#include <string>

namespace chorus::transport {

Status ValidatePost(int self, int size, bool send, int peer, const void* buf, size_t bytes) {
  const bool peer_ok = peer >= 0 && peer < size, buf_ok = buf != nullptr || bytes == 0;
  if (peer_ok && buf_ok) return Status::Ok();  // every post: no string built
  const std::string what =
      "rank " + std::to_string(self) + ": " + (send ? "send to" : "recv from") + " rank " + std::to_string(peer);
  if (!peer_ok) return InvalidArgument(what + ", but the world has ranks 0.." + std::to_string(size - 1));
  return InvalidArgument(what + " of " + std::to_string(bytes) + " bytes from a null buffer");
}

Status GroupMismatch(int self, int peer, uint64_t tag) {
  return MismatchError("rank " + std::to_string(peer) + " sent tag " + std::to_string(tag) +
                       " for a different call than rank " + std::to_string(self) + " expected");
}

Status CheckMatch(int self, int peer, uint64_t tag, uint64_t len, uint64_t fingerprint, const BasicRequest& recv) {
  if (len != recv.bytes()) {
    return MismatchError("rank " + std::to_string(peer) + " sent " + std::to_string(len) + " bytes with tag " +
                         std::to_string(tag) + ", rank " + std::to_string(self) + " posted a receive of " +
                         std::to_string(recv.bytes()) + " bytes");
  }
  if (recv.fingerprint() != 0 && fingerprint != recv.fingerprint()) return GroupMismatch(self, peer, tag);
  return Status::Ok();
}

template <typename V>
typename GroupFingerprints::Flat<V>::iterator GroupFingerprints::Find(Flat<V>& m, uint64_t group) {
  return std::lower_bound(m.begin(), m.end(), group,
                          [](const std::pair<uint64_t, V>& e, uint64_t g) { return e.first < g; });
}

template <typename V>
void GroupFingerprints::EraseRange(Flat<V>& m, uint64_t first, uint64_t last) {
  auto from = Find(m, first);
  auto to =
      std::upper_bound(from, m.end(), last, [](uint64_t g, const std::pair<uint64_t, V>& e) { return g < e.first; });
  m.erase(from, to);
}

uint64_t GroupFingerprints::Declare(uint64_t group, uint64_t fp) {
  auto d = Find(declared_, group);
  if (d == declared_.end() || d->first != group) declared_.insert(d, {group, fp});  // the first declaration stays
  auto it = Find(arrived_, group);
  if (it == arrived_.end() || it->first != group) return 0;
  if (it->second.first != fp) return it->second.first;
  if (it->second.second != 0 && it->second.second != fp) return it->second.second;
  return 0;
}

bool GroupFingerprints::Arrived(uint64_t group, uint64_t fp) {
  // An unfingerprinted message (the agreement's barrier after a mismatch) claims no call.
  if (fp == 0) return false;
  auto it = Find(arrived_, group);
  if (it == arrived_.end() || it->first != group) {
    arrived_.insert(it, {group, {fp, uint64_t{0}}});
  } else if (it->second.first != fp && it->second.second == 0) {
    it->second.second = fp;
  }
  auto d = Find(declared_, group);
  return d != declared_.end() && d->first == group && d->second != fp;
}

void GroupFingerprints::Erase(uint64_t first_group, uint64_t last_group) {
  EraseRange(declared_, first_group, last_group);
  EraseRange(arrived_, first_group, last_group);
}

}  // namespace chorus::transport
