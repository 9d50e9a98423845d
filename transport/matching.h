// Matching rules shared by every transport (see transport.h): size and fingerprint
// checks, and the per-peer record of which fingerprint each tag group (one call) uses.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/request.h"

namespace chorus::transport {

// Tags that agree above these bits belong to one call.
constexpr int kTagGroupShift = 16;
inline uint64_t TagGroup(uint64_t tag) { return tag >> kTagGroupShift; }

// OK when a message of `len` bytes with `fingerprint` from `peer` may land in `recv`;
// otherwise kMismatch naming both ranks and both sizes (or both calls).
Status CheckMatch(int self, int peer, uint64_t tag, uint64_t len, uint64_t fingerprint, const BasicRequest& recv);
// OK, or kInvalidArgument naming what is wrong with a Send/Recv's peer or buffer.
Status ValidatePost(int self, int size, bool send, int peer, const void* buf, size_t bytes);
// "rank 1 sent tag 7 for a different call than rank 0 expected"
Status GroupMismatch(int self, int peer, uint64_t tag);

// For one peer: the fingerprint this rank's Recvs declared for each tag group, and the
// first two distinct fingerprints that arrived from the peer for it.
class GroupFingerprints {
 public:
  // A Recv with a non-zero fingerprint was posted for `group`. Returns the conflicting
  // fingerprint that already arrived from the peer, or 0.
  uint64_t Declare(uint64_t group, uint64_t fp);
  // A message with `fp` arrived for `group`. Returns true when it contradicts the
  // fingerprint the Recvs declared: the group's Recvs must fail.
  bool Arrived(uint64_t group, uint64_t fp);
  // Forgets groups [first, last].
  void Erase(uint64_t first_group, uint64_t last_group);

 private:
  // Sorted by group. Vectors, not maps: a group is added and erased on every call, the
  // groups live at once are the calls in flight (a few), and new ones mostly go at the
  // end; a map allocated and freed a node each time (docs/design/matching.md).
  template <typename V>
  using Flat = std::vector<std::pair<uint64_t, V>>;
  template <typename V>
  static typename Flat<V>::iterator Find(Flat<V>& m, uint64_t group);
  template <typename V>
  static void EraseRange(Flat<V>& m, uint64_t first, uint64_t last);

  Flat<uint64_t> declared_;
  Flat<std::pair<uint64_t, uint64_t>> arrived_;
};

}  // namespace chorus::transport
