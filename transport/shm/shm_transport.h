// Shared memory between the ranks of one host, for host buffers. Each rank owns a
// segment with a ring per local peer (layout.h). A message below LargeMinBytes goes at
// once as kData frames copied through the ring. A larger one is announced by a kRts
// frame and moves only once its receive is posted, so nothing large waits in a
// receiver: where the receiver can read the sender's memory (process_vm_readv; not
// where ptrace rules forbid it, as in Docker) it copies the message straight into its
// buffer and answers kAck (one copy); elsewhere it answers kCts and the sender streams
// kData frames, which land in the posted buffer (two copies). From kTogetherMinBytes
// the receiver asks the sender to help (kPut): while it reads pieces of the message,
// the sender, idle until the kAck, writes others into the receiver's buffer
// (process_vm_writev), so two cores copy it.
//
// Who drives: the thread that waits on a request (application progress): it drains
// the incoming rings, pushes queued frames, checks deadlines, polling for spin_us after
// the last progress, then sleeping on its segment's doorbell (a futex every writer
// bumps when the owner has sleepers). A proxy thread takes over when no application
// thread has driven for kProxyHandBack (requests nobody waits on) and watches the local
// peers' processes (pidfd): a peer that exits without closing its transport fails the
// communicator naming it, within milliseconds, not at a timeout. Only the peers this
// rank has posted to or from are watched (the algorithms' partners: a descriptor per
// partner, not per rank of the host); an abort reaches every rank of the host anyway.
//
// Matching, fingerprints, tag groups, deadlines and aborts follow transport.h, as TCP
// and RDMA do. Only ranks of this host are reachable; a PerPeerTransport routes the
// others elsewhere.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer_cache.h"
#include "common/unique_fd.h"
#include "transport/inbox.h"
#include "transport/matching.h"
#include "transport/request.h"
#include "transport/shm/layout.h"
#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace chorus::transport {

// Bytes of each ring (one per local peer that sends to a rank): the most, the least, and
// the rings' bytes in one rank's segment, above which they shrink (a power of two each),
// so that a host's segments grow as n, not n^2, past 64 ranks.
constexpr size_t kShmRingBytes = 256 << 10;
constexpr size_t kShmMinRingBytes = 16 << 10;
constexpr size_t kShmRingsPerRankBytes = 16 << 20;
// The ring of each local peer when `local_ranks` ranks share the host (every rank of the
// host computes the same).
size_t ShmRingBytes(int local_ranks);
// Messages from this size wait for their receive (kRts), then go by single copy where
// the receiver can read the sender. To a receiver that cannot, a message that fits one
// frame (MaxFramePayload) goes at once all the same: asking first would only add two
// hand-offs to the same two copies, and where ranks outnumber cores each is a wait for
// the scheduler.
constexpr uint64_t kLargeMinBytes = 32 << 10;
// Messages read by single copy from this size are read together with their sender.
constexpr uint64_t kTogetherMinBytes = 512 << 10;
// Early messages up to this size are kept inside their record, not in a cached buffer.
constexpr size_t kShmEarlyInlineBytes = 256;

// Large messages read straight from the sender's memory: from every other process that
// allows it unless this host runs more ranks than cores (auto), from every process that
// allows it and between threads of one process (on), never (off).
// docs/design/shm_transport.md says why auto does not time the read against the rings.
enum class SingleCopy { kAuto, kOn, kOff };

struct ShmOptions {
  int rank = 0;
  int size = 1;
  std::vector<int> local_ranks;  // this host's ranks in rank order, this one included
  std::string dir = "/dev/shm";  // where segments are created (CHORUS_SHM_DIR)
  uint64_t comm_id = 0;
  SingleCopy single_copy = SingleCopy::kAuto;  // CHORUS_SHM_SINGLE_COPY
  int64_t timeout_ms = 30 * 60 * 1000;
  // A peer stopped (SIGSTOP, a debugger) this long while a request waits fails it.
  int64_t peer_timeout_ms = 30 * 1000;
  int64_t spin_us = 100;
  bool crowded = false;           // more ranks than cores on this machine: yield while polling
  int64_t early_cache_bytes = 0;  // buffers of early messages kept for reuse
  size_t ring_bytes = 0;          // 0: ShmRingBytes(local ranks); else a power of two (tests)
};

class ShmTransport final : public Transport, public RequestDriver {
 public:
  // Phase 1: creates and maps this rank's segment (path()). Nothing is shared yet.
  static Result<std::unique_ptr<ShmTransport>> Create(const ShmOptions& opts);
  // Phase 2: maps every local rank's segment (paths by local index; this rank's is
  // skipped), probes which peers' memory this rank can read.
  Status Connect(const std::vector<std::string>& paths, const std::vector<int>& pids);
  // Phase 3, once every local rank connected: unlinks this rank's file, reads the
  // peers' verdicts on single copy, starts the proxy thread.
  Status Start();
  ~ShmTransport() override;

  const std::string& path() const { return segment_.path(); }
  // Whether `rank` is reachable through this transport.
  bool IsLocal(int rank) const { return rank >= 0 && rank < size_ && local_index_[rank] >= 0; }

  int rank() const override { return opts_.rank; }
  int size() const override { return size_; }
  RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  void ReleaseTags(uint64_t first, uint64_t last) override;
  void Progress() override;
  void Abort(const Status& reason) override;
  Status health() override { return health_.Get(); }
  std::string Describe() const override;
  TrafficCounters counters() const override {
    TrafficCounters c;
    c.early_messages = early_messages_.load(std::memory_order_relaxed);
    c.early_bytes = early_bytes_.load(std::memory_order_relaxed);
    c.read_messages = read_messages_.load(std::memory_order_relaxed);
    c.written_pieces = written_pieces_.load(std::memory_order_relaxed);
    return c;
  }
  void Drive(BasicRequest& req, Deadline deadline) override;

 private:
  // A message that arrived before its receive: its bytes, or (kRts) where to read them.
  struct Early {
    uint64_t fingerprint = 0;
    uint64_t total = 0;
    uint64_t got = 0;  // kData bytes arrived so far
    bool rts = false;
    uint64_t addr = 0, cookie = 0;
    BufferCache::Buffer buf;  // the bytes of a message larger than `small`
    // A small message's bytes: where ranks share cores, one arrives early on most calls,
    // and the buffer cache's lock and map cost more than the message.
    alignas(8) char small[kShmEarlyInlineBytes];
    bool complete() const { return rts || got == total; }
    char* data() { return total <= sizeof(small) ? small : buf.data(); }
  };
  // Per (peer, tag): receives posted and messages arrived, each in order; the n-th of
  // one matches the n-th of the other. A receive that already failed stays queued and
  // swallows its message.
  struct TagQueue {
    uint64_t tag = 0;
    std::vector<BasicRequestPtr> recvs;
    size_t recv_head = 0;
    std::vector<std::unique_ptr<Early>> early;
    size_t early_head = 0;
    bool idle() const { return recv_head == recvs.size() && early_head == early.size(); }
  };
  // The tags with something queued (a few at a time: a flat list), and emptied queues
  // kept for reuse with their vectors' capacity.
  struct TagQueues {
    std::vector<std::unique_ptr<TagQueue>> live, spare;
    TagQueue& Get(uint64_t tag);
    void RetireIfIdle(TagQueue& q);
  };
  // A frame waiting for ring space: a send's data (written in frames as space allows),
  // its kRts, or a kAck.
  struct OutFrame {
    shm::Frame frame;
    BasicRequestPtr send;  // kData/kRts: the send it belongs to
    uint64_t sent = 0;     // kData: bytes written so far
  };
  // The kData message being received from a peer (its frames are consecutive).
  struct Incoming {
    bool active = false;
    uint64_t tag = 0, total = 0, got = 0, fingerprint = 0;
    BasicRequestPtr recv;    // straight into its buffer
    Early* early = nullptr;  // or into an early buffer
  };
  struct Peer {
    int rank = -1;
    int index = -1;
    pid_t pid = 0;
    shm::Segment segment;         // the peer's segment, mapped
    shm::Control* ctl = nullptr;  // its control block
    shm::Slot* out = nullptr;     // our ring into it
    shm::Slot* in = nullptr;      // its ring into us (in our segment)
    uint64_t out_head = 0;        // our copy of out->head
    uint64_t out_tail = 0;        // out->tail when last read: reread only when the ring looks full
    uint64_t in_tail = 0;         // our copy of in->tail
    bool single_copy = false;     // it can read our memory: large sends go as kRts
    std::vector<OutFrame> outq;
    size_t outq_head = 0;
    std::atomic<bool> out_blocked{false};    // outq waits for ring space
    std::atomic<uint64_t> out_tail_seen{0};  // out->tail when it did
    TagQueues tags;
    Incoming incoming;
    GroupFingerprints groups;
    std::vector<std::pair<uint64_t, BasicRequestPtr>> awaiting_ack;  // sent kRts, by cookie
    std::vector<std::pair<uint64_t, BasicRequestPtr>> streams;       // receives we sent kCts for
    uint64_t next_cookie = 1;
    Status gone;                       // set once it left or failed: its requests fail with this
    std::atomic<bool> watched{false};  // posted to or from: the proxy watches its process
    bool pidfd_opened = false;         // proxy thread only: pidfd_open was tried
    UniqueFd pidfd;
    uint32_t seen_state = 0;
    Clock::time_point stopped_since{};  // first seen stopped ({}: running when last looked)
  };

  explicit ShmTransport(const ShmOptions& opts);
  std::string PeerDesc(int peer) const;
  bool SingleCopyFrom(const Peer& p);  // at Connect: whether p's large messages are read from its memory
  Peer* LocalPeer(int rank) const { return IsLocal(rank) ? peers_[local_index_[rank]].get() : nullptr; }

  // Under mu_.
  // Settles a post that reaches no peer (bad arguments, an aborted transport, a rank of
  // another host, a peer gone) and returns false; true: post it.
  bool Admit(BasicRequest& req);
  bool PollLocked(Clock::time_point now);  // true when something moved or finished
  bool DrainRing(Peer& p);
  Status OnFrame(Peer& p, const shm::Frame& f, const char* payload);
  void OnData(Peer& p, const shm::Frame& f, const char* payload);
  void OnRts(Peer& p, const shm::Frame& f);
  void OnAck(Peer& p, const shm::Frame& f);
  void OnCts(Peer& p, const shm::Frame& f);
  void OnPut(Peer& p, const shm::Frame& f);
  // The request filed under `cookie` (a kRts sent, a kCts asked for), taken out; null if none.
  static BasicRequestPtr TakeByCookie(std::vector<std::pair<uint64_t, BasicRequestPtr>>& list, uint64_t cookie);
  bool PushOut(Peer& p);
  bool WriteFrame(Peer& p, const shm::Frame& f, const void* payload);
  void Queue(Peer& p, OutFrame of);
  void SendControl(Peer& p, shm::FrameType type, uint64_t cookie, uint64_t arg);
  // Reads a kRts message into dst; OK, or why it could not.
  Status ReadRemote(Peer& p, void* dst, uint64_t addr, uint64_t bytes);
  // Reads it together with its sender (kPut), returning once every piece is in dst.
  Status ReadTogether(Peer& p, char* dst, uint64_t addr, uint64_t bytes, uint64_t cookie);
  // Delivers an early message (complete) to a receive matched with it.
  void Deliver(Peer& p, Early& e, const BasicRequestPtr& recv);
  // Matches the complete early messages at the front of q with its receives.
  void MatchQueued(Peer& p, TagQueue& q);
  void FailGroup(Peer& p, uint64_t group, uint64_t remote_fp);
  void Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp = 0);
  void CheckPeers();
  // Why a peer that is no longer running fails what it shares with this rank.
  Status PeerStateError(const Peer& p) const;
  void PeerGone(Peer& p, const Status& why);
  bool HasPending(const Peer& p) const;
  void AbortLocked(const Status& reason);
  // Carries out an abort found where the matching state was in use (deferred_abort_).
  void AbortIfDeferred();
  // Publishes this rank's new state and alerts every peer.
  void Announce(shm::PeerState state);
  void SelfSend(const BasicRequestPtr& req);
  void SelfRecv(const BasicRequestPtr& req);
  void TakeEarly(Early& e, uint64_t bytes);

  // Any thread.
  bool HasWork();
  void Sleep(Clock::time_point until);
  void Ring(shm::Control* ctl);  // wakes ctl's sleepers, if any
  void ProxyLoop();
  void Watch(Peer& p);       // under mu_: the first post to or from p asks the proxy to watch it
  void OpenPidfds();         // proxy thread: pidfds of the peers newly asked for
  void OnPeerExit(Peer& p);  // proxy thread: p's process is gone
  void CheckPidfds(int timeout_ms);
  // A peer seen stopped for peer_timeout_ms while a request has waited as long fails
  // the transport: a frozen process never answers, while a busy one is only late.
  void CheckStoppedPeers(Clock::time_point now);

  const ShmOptions opts_;
  const int size_;
  const size_t ring_bytes_;  // ShmRingBytes of this host's ranks
  // The largest kData frame: a quarter of the ring, so a writer never waits for a whole ring.
  size_t MaxFramePayload() const { return ring_bytes_ / 4; }
  // The smallest message that waits for its receive (kRts) on its way to p.
  uint64_t LargeMinBytes(const Peer& p) const {
    return p.single_copy ? kLargeMinBytes : std::max<uint64_t>(kLargeMinBytes, MaxFramePayload() + 1);
  }
  std::vector<int> local_index_;  // by rank: index among local ranks, or -1
  shm::Segment segment_;          // ours
  shm::Control* ctl_ = nullptr;
  BufferCache early_bufs_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by local index (null for this rank)
  std::atomic<uint64_t> early_messages_{0}, early_bytes_{0}, read_messages_{0}, written_pieces_{0};
  FirstError health_;

  std::mutex mu_;  // everything below, and the peers' matching state
  bool aborted_ = false;
  Status abort_status_;
  int64_t active_ = 0;  // requests posted and not finished
  RequestDeadlines deadlines_{opts_.timeout_ms};
  bool completed_ = false;  // a request finished in this round: wake the other waiters
  // An abort found inside Deliver (ReadTogether), whose callers still walk the queues an
  // abort frees: carried out where they are done (DrainRing, Recv).
  Status deferred_abort_;
  TagQueues self_tags_;  // this rank's messages to itself

  std::atomic<bool> aborted_flag_{false};
  std::atomic<uint32_t> seen_alert_{0};  // ctl_->alert when the peers' states were last read
  std::atomic<int> app_drivers_{0};
  std::atomic<int64_t> last_app_drive_ns_{0};
  std::atomic<bool> stop_{false};
  bool streams_ = false;         // set at Start: some peer's large messages go through the rings
  std::atomic<int> watched_{0};  // peers asked to be watched (Watch)
  int pidfds_opened_ = 0;        // proxy thread: how many of them OpenPidfds has seen
  std::thread proxy_;
};

}  // namespace chorus::transport
