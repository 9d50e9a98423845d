// The bootstrap ring: after one store key each, the ranks of a communicator connect in
// a ring over TCP (rank r to rank r+1) and run their set-up all-gathers over it, so
// that the store (on rank 0) carries O(n) bytes instead of O(n^2). The store is still
// the first contact: each rank sets the address it listens on and reads its next
// rank's. Protocol and failure behaviour: docs/design/bootstrap_ring.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "rendezvous/bootstrap_ring_wire.h"
#include "rendezvous/store.h"

namespace chorus::rendezvous {

class BootstrapRing {
 public:
  // A record larger than this is refused (a bound on what a peer can make us buffer).
  static constexpr size_t kMaxRecordBytes = ring_wire::kMaxRecordBytes;
  // What this rank holds from one neighbour at most; beyond it that neighbour waits.
  static constexpr size_t kMaxBufferedBytes = ring_wire::kMaxBufferedBytes;

  // Listens on an ephemeral port of `bind_address` (an IP literal), sets the one key
  // `prefix`ring/<rank> to that address, reads the next rank's, connects to it and
  // accepts the previous rank, all by `deadline`. Connections that fail the handshake
  // (another communicator's comm id, another world size, no proof of the job
  // `secret`) are closed and ignored. Size 1: no socket, no key.
  static Result<std::unique_ptr<BootstrapRing>> Create(Store& store, const std::string& prefix, int rank, int size,
                                                       const std::string& bind_address, uint64_t comm_id,
                                                       const JobSecret& secret, Deadline deadline);
  ~BootstrapRing();
  BootstrapRing(const BootstrapRing&) = delete;
  BootstrapRing& operator=(const BootstrapRing&) = delete;

  // Everyone's `mine`, indexed by rank: records go both ways round the ring (n/2 steps
  // each way at most), each rank forwarding what its neighbours sent. A neighbour that fails or closes fails this rank
  // at once (and it tells its own neighbours why); a timeout names the ranks whose records never arrived. After an
  // error the ring is closed and every later call fails.
  Result<std::vector<std::string>> AllGather(const std::string& mine, Deadline deadline);

  // Closes both ring sockets (also done by the destructor).
  void Close();

  // For tests: the most this rank holds, not yet taken, from one neighbour.
  size_t buffered_bytes() const { return std::max(inbox_.size(), from_next_.size()); }

 private:
  BootstrapRing(std::string prefix, int rank, int size);

  Status Form(Store& store, const std::string& bind_address, uint64_t comm_id, const JobSecret& secret,
              Deadline deadline);
  // Fails the ring: tells both neighbours (origin, reason), closes, remembers `st`.
  Status Fail(Status st, int origin, const std::string& reason);
  Status Fail(const Status& st) { return Fail(st, rank_, st.message()); }
  // A failure frame (origin, its status code, the reason at buf[off, off+len)) came
  // from rank `from`.
  Status FailureHeard(const std::string& buf, size_t off, int origin, size_t len, int from, uint32_t code);
  // One way round the ring during an all-gather.
  struct Way {
    bool from_prev;  // records come from the previous rank (and go on to the next)
    int want;        // records this rank gets this way
    int got;
    int expect;    // the origin of the next one
    int queued;    // records queued for the neighbour on the far side
    int to_queue;  // how many it needs from this rank besides this rank's own
  };
  // Reads what is there from prev_ (into inbox_) or next_ (into from_next_), while it
  // holds less than kMaxBufferedBytes; marks the end of the stream, also where `revents`
  // (poll's) report a hang-up or error on a full side.
  Status Pump(bool from_prev, int revents);
  // That side holds kMaxBufferedBytes: it is not read (nor polled for input) until taken.
  bool Full(bool from_prev) const { return (from_prev ? inbox_ : from_next_).size() >= kMaxBufferedBytes; }
  // During set-up, before the all-gathers: a failure frame or a close from that side.
  Status CheckDuringSetUp(bool from_prev);
  // Takes the complete frames of one way: records stored, forwards queued.
  Status TakeFrames(Way& way, std::vector<std::string>* records);
  std::string What() const;
  std::string Key(int rank) const;

  std::string prefix_;
  int rank_ = 0;
  int size_ = 1;
  int prev_rank_ = 0;
  int next_rank_ = 0;
  UniqueFd prev_;          // accepted from rank-1 (forward frames in, backward frames out)
  UniqueFd next_;          // connected to rank+1 (forward frames out, backward frames in)
  std::string inbox_;      // from prev_, not yet taken
  std::string from_next_;  // from next_, not yet taken
  bool prev_eof_ = false;
  bool next_eof_ = false;
  bool next_ready_ = false;  // next_'s handshake is done: failure frames may go there
  std::string out_;          // frames for next_ not yet sent
  size_t out_off_ = 0;
  std::string back_out_;  // frames for prev_ not yet sent
  size_t back_out_off_ = 0;
  uint32_t seq_ = 0;
  Status failed_;
};

}  // namespace chorus::rendezvous
