// Matching rules shared by every transport (see transport.h): size and fingerprint
// checks, the per-peer record of which fingerprint each tag group (one call) uses, and
// the per-peer matching of messages to posted Recvs that the TCP and RDMA engines share.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/request.h"
#include "transport/tag.h"

namespace chorus::transport {

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
  // fingerprint the Recvs declared: the group's Recvs must fail. fp 0 never does.
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

// What an engine keeps per tag besides the messages: nothing.
struct NoTagExtra {
  bool empty() const { return true; }
};

// One peer's messages matched to posted Recvs: the n-th Recv posted for a tag takes the
// n-th message the peer sent with it. Msg is the engine's record of one incoming
// message, created by whichever comes first, its Recv or its first bytes (or
// announcement); it has `BasicRequestPtr recv` (the Recv, once posted, until it is
// finished) and `bool discard` (nobody will take it). TagExtra is what else the engine
// keeps per tag; a released tag is forgotten only once it has no messages and
// TagExtra::empty(). `fail(req, status, remote_fp)` finishes a request in the engine.
template <typename Msg, typename TagExtra = NoTagExtra>
class TagMatcher {
 public:
  struct TagState : TagExtra {
    uint64_t next_send_seq = 0;
    uint64_t next_recv_seq = 0;
    std::unordered_map<uint64_t, Msg> msgs;  // by sequence number within the tag
  };
  // Where a posted Recv went: its message, and whether it failed at once.
  struct Posted {
    TagState& ts;
    uint64_t seq;
    Msg& msg;
    bool failed;
  };

  TagState& operator[](uint64_t tag) { return tags_[tag]; }
  // Ordered by tag: a group's tags are one range.
  typename std::map<uint64_t, TagState>::iterator begin() { return tags_.begin(); }
  typename std::map<uint64_t, TagState>::iterator end() { return tags_.end(); }

  // Takes the next message of req's tag for req. Fails req at once (and discards its
  // message) where another call's message already arrived in its group.
  template <typename Fail>
  Posted PostRecv(int self, int peer, const BasicRequestPtr& req, Fail&& fail) {
    TagState& ts = tags_[req->tag()];
    const uint64_t seq = ts.next_recv_seq++;
    Msg& m = ts.msgs[seq];
    m.recv = req;
    if (req->fingerprint() != 0) {
      if (uint64_t other = groups_.Declare(TagGroup(req->tag()), req->fingerprint())) {
        fail(req, GroupMismatch(self, peer, GroupFirstTag(TagGroup(req->tag()))), other);
        m.recv.reset();
        m.discard = true;
        return {ts, seq, m, true};
      }
    }
    return {ts, seq, m, false};
  }

  // A message with fingerprint `fp` (0: none) arrived with `tag`. Where it contradicts
  // the fingerprint its group's Recvs declared, fails them all (FailGroup).
  template <typename Fail, typename Done>
  void Arrived(int self, int peer, uint64_t tag, uint64_t fp, Fail&& fail, Done&& done) {
    if (fp != 0 && groups_.Arrived(TagGroup(tag), fp)) FailGroup(self, peer, TagGroup(tag), fp, fail, done);
  }

  // Fails every Recv posted for `group` (GroupMismatch, exposing remote_fp) and marks
  // its message discarded. done(tag, msg) says whether the engine is finished with a
  // discarded message (it is forgotten) or still waits for its bytes.
  template <typename Fail, typename Done>
  void FailGroup(int self, int peer, uint64_t group, uint64_t remote_fp, Fail&& fail, Done&& done) {
    const uint64_t last = GroupLastTag(group);
    for (auto t = tags_.lower_bound(GroupFirstTag(group)); t != tags_.end() && t->first <= last; ++t) {
      for (auto it = t->second.msgs.begin(); it != t->second.msgs.end();) {
        Msg& m = it->second;
        if (m.recv) {
          fail(m.recv, GroupMismatch(self, peer, t->first), remote_fp);
          m.recv.reset();
          m.discard = true;
        }
        it = m.discard && done(t->first, m) ? t->second.msgs.erase(it) : std::next(it);
      }
    }
  }

  // Tags [first, last] will not be used again: forgets those with nothing pending, and
  // their groups' fingerprints.
  void Release(uint64_t first, uint64_t last) {
    for (auto it = tags_.lower_bound(first); it != tags_.end() && it->first <= last;) {
      it = it->second.msgs.empty() && it->second.TagExtra::empty() ? tags_.erase(it) : std::next(it);
    }
    groups_.Erase(TagGroup(first), TagGroup(last));
  }

  // Fails every posted Recv with `st` and forgets every message (the peer is lost, or
  // the engine aborts).
  template <typename Fail>
  void FailAll(const Status& st, Fail&& fail) {
    for (auto& [tag, ts] : tags_) {
      for (auto& [seq, m] : ts.msgs) {
        if (m.recv) fail(m.recv, st, uint64_t{0});
      }
      ts.msgs.clear();
    }
  }

 private:
  std::map<uint64_t, TagState> tags_;  // ordered: releases and groups are ranges
  GroupFingerprints groups_;
};

}  // namespace chorus::transport
