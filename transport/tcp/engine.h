// The progress engine of one TcpTransport: it owns every socket, matches incoming frames
// to posted receives, queues outgoing frames, and turns failures, timeouts and aborts
// into request errors. Application threads post requests through a locked queue and an
// eventfd.
//
// Who drives it: with a poller any thread may use (epoll), a thread that waits on a
// request drives the engine itself (application progress, as MPI does), so a short
// message costs no hand-off between threads; the engine thread stays parked while
// application threads drive and takes over once they have been away for kHandBack
// (pending asynchronous requests, failure detection between calls). With io_uring the
// engine thread alone drives and application threads sleep on their requests.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/buffer_cache.h"
#include "common/status.h"
#include "transport/early_hold.h"
#include "transport/inbox.h"
#include "transport/matching.h"
#include "transport/request.h"
#include "transport/tcp/conn.h"
#include "transport/tcp/poller.h"
#include "transport/tcp/socket_util.h"

namespace chorus::transport::tcp {

struct EngineOptions {
  int rank = 0;
  int size = 1;
  int nsockets = 1;
  int64_t stripe_min_bytes = 256 << 10;
  int64_t timeout_ms = 30 * 60 * 1000;
  // A peer that requests wait on and that sends nothing this long, not even the PONG to
  // a PING, fails (CHORUS_PEER_TIMEOUT; docs/design/tcp_liveness.md).
  int64_t peer_timeout_ms = 30 * 1000;
  bool use_uring = false;
  // With epoll: threads that wait on a request may drive the engine (application
  // progress). Off: the engine thread alone drives, as with io_uring (TCP channels after
  // the first, whose parts of a message move beside channel 0's).
  bool app_progress = true;
  int64_t spin_us = 0;            // after activity, poll this long before sleeping
  int64_t early_cache_bytes = 0;  // buffers of early messages kept for reuse (BufferCache)
  // Tests: every message (collectives too) of at least this many bytes goes by
  // rendezvous, as if the peer had said PAUSE for good. Default: never.
  uint64_t rendezvous_all_from = UINT64_MAX;
  // Early bytes held from a peer before it is told to PAUSE, and to RESUME (early_hold.h).
  uint64_t pause_above = kDefaultPauseAbove;
  uint64_t resume_below = kDefaultResumeBelow;
  // Sockets the engine may come to hold (AddPeer after Start); 0: those given to Start.
  int max_conns = 0;
};

struct PeerInfo {
  std::string host;
  std::string address;
};

class Engine final : public IoHandler, public RequestDriver {
 public:
  // Takes the connected, handshaken sockets (sockets[peer][index]; empty for this rank)
  // and starts the engine thread.
  static Result<std::unique_ptr<Engine>> Start(const EngineOptions& opts, std::vector<PeerInfo> peers,
                                               std::vector<std::vector<UniqueFd>> sockets);
  // Stops the thread: Abort("transport destroyed") first when requests are pending.
  ~Engine() override;

  RequestPtr Post(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);
  void Abort(const Status& reason);
  // Lazy connections: hands over the handshaken sockets to `peer` (it had none). The
  // engine takes them at its next round, before any request posted after this call.
  void AddPeer(int peer, std::vector<UniqueFd> sockets);
  // Forgets the state of tags in [first, last] (see Transport::ReleaseTags).
  void ReleaseTags(uint64_t first, uint64_t last);
  Status health() { return health_.Get(); }
  // Application threads waiting on a request (application progress only).
  void Drive(BasicRequest& req, Deadline deadline) override;
  // One non-blocking round of I/O when nobody drives (application progress only).
  void Progress();
  const std::string& engine_name() const { return engine_name_; }
  TrafficCounters counters() const {
    return {early_messages_.load(std::memory_order_relaxed), early_bytes_.load(std::memory_order_relaxed)};
  }

  // Engine thread: results from the poller and frames from the state machines.
  void OnRecvResult(Conn* c, int64_t res) override;
  void OnSendResult(Conn* c, int64_t res) override;
  Status OnDataHeader(Conn* c, const FrameHeader& h, RecvDest* dest);
  Status OnDataDone(Conn* c, const FrameHeader& h, void* cookie);
  Status OnAbortFrame(Conn* c, const std::string& reason);
  Status OnControlFrame(Conn* c, const FrameHeader& h);

 private:
  // One incoming message (peer, tag, tag_seq): created by whichever comes first, its
  // posted Recv or its first frame header.
  struct InMsg {
    bool header_seen = false;
    uint64_t total_len = 0;
    uint64_t fingerprint = 0;
    uint64_t bytes_done = 0;
    int frames_seen = 0;
    BufferCache::Buffer ubuf;  // an unexpected message's bytes, until its Recv is posted
    BasicRequestPtr recv;
    bool discard = false;     // nobody will take it (size mismatch, timed-out Recv)
    bool rts_seen = false;    // its sender waits for our READY (rendezvous)
    bool ready_sent = false;  // READY sent: its data will come
    uint64_t held = 0;        // bytes of ubuf counted in its peer's early_held
  };
  // Per tag besides its messages: rendezvous sends posted and waiting for the peer's
  // READY, and READYs for sends not posted yet.
  struct TagSends {
    std::unordered_map<uint64_t, BasicRequestPtr> awaiting_ready;
    std::unordered_set<uint64_t> early_ready;
    bool empty() const { return awaiting_ready.empty(); }
  };
  using Tags = TagMatcher<InMsg, TagSends>;
  using TagState = Tags::TagState;
  struct Peer {
    PeerInfo info;
    std::vector<std::unique_ptr<Conn>> conns;
    Status error;  // set once the connection is broken
    uint64_t rr = 0;
    Tags tags;            // messages matched to Recvs, and fingerprints per tag group
    EarlyHold held;       // its early messages we keep, and whether we said PAUSE
    bool paused = false;  // it told us to PAUSE
    // Liveness (CheckPeers): our unfinished requests with it, since when some are, when
    // we last heard from it (at a check that found `heard` set) and last pinged it.
    int pending = 0;
    bool heard = false;  // bytes came since the last check
    Clock::time_point wait_since{}, last_heard{}, last_ping{};
  };

  Engine(const EngineOptions& opts, std::vector<PeerInfo> peers);
  void Run(std::vector<std::vector<UniqueFd>>* sockets, std::promise<Status>* started);
  Status Init(std::vector<std::vector<UniqueFd>>* sockets);
  void Loop();
  void Teardown();
  // One round of the engine by the thread holding drive_mu_: commands, failures,
  // timeouts, then a poll of at most max_wait_ms (-1: until the next deadline; none
  // once `wanted` is complete). Returns true once the engine has finished (stopped,
  // or aborted and drained).
  bool Step(Clock::time_point now, int max_wait_ms, bool engine_thread, BasicRequest* wanted = nullptr);
  static constexpr int kNoPoll = -2;  // Step(kNoPoll): commands only
  // Application progress: a thread that drove hands over to the engine thread only
  // after kHandBack without a driver.
  void Park();
  void Kick();
  void LeaveDriving(Clock::time_point now);

  void DrainCommands(Clock::time_point now);
  void TakeAddedPeers();
  void PostSend(const BasicRequestPtr& req);
  // Whether a message of `bytes` with `tag` waits for the receiver's READY (apart from
  // a PAUSE): large point-to-point ones, and (tests) all from rendezvous_all_from.
  bool ByRendezvous(uint64_t tag, uint64_t bytes) const;
  // Queues the DATA frames of send `seq` (its peer is ready for them).
  void StartData(const BasicRequestPtr& req, uint64_t seq);
  // A READY or RTS frame for message `seq` of `tag`, on the peer's first socket.
  void SendControl(int peer, FrameType type, uint64_t tag, uint64_t seq, uint64_t total_len);
  // Once per message, or again (`again`) when an RTS asks for it.
  void SendReady(int peer, uint64_t tag, uint64_t seq, InMsg& m, bool again = false);
  // After a PAUSE: whole messages queued on c that have not started go back to
  // waiting for their READY (an RTS each).
  void PullBackData(Conn* c);
  void PostRecv(const BasicRequestPtr& req);
  void SelfSend(const BasicRequestPtr& req);
  // Gives m a buffer for a message from `peer` that arrived before its Recv (counted in
  // counters() and, from other ranks, in the peer's early_held); ReleaseHeld forgets it.
  void TakeEarly(int peer, InMsg& m, uint64_t bytes);
  void ReleaseHeld(int peer, InMsg& m);
  void Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp = 0);
  void FrameResolved(const BasicRequestPtr& req, const Status& st);
  void MaybeComplete(int peer, TagState& ts, uint64_t seq);

  // A frame of a call this rank is not in (same tag group, other fingerprint) fails
  // every Recv of that group from the peer: the ranks called different collectives.
  // Finish, as the matcher (TagMatcher) calls it.
  auto Finisher() {
    return [this](const BasicRequestPtr& r, const Status& st, uint64_t remote_fp) { Finish(r, st, remote_fp); };
  }
  void FailPeer(int peer, const Status& st);
  // A connection broke: the peer fails once all its connections ended, or after a
  // moment (FailBrokenConns), unless an ABORT frame names the real cause first.
  void ConnLost(Conn* c, const Status& why, bool recv_ended);
  void FailBrokenConns();
  void FinalizeFailedPeers();
  void BeginAbort(const Status& reason);
  void QueueAbortFrame(Conn* c);  // needs no send in flight on c
  bool ProgressAbort();           // true once everything is failed and no I/O is in flight
  void CheckTimeouts(Clock::time_point now);
  // Pings a peer that requests wait on and that has been silent for a while; fails one
  // silent past peer_timeout_ms. Peers nobody waits on are never failed for silence.
  void CheckPeers(Clock::time_point now);
  int NextTimeoutMs(Clock::time_point now);
  std::string PeerDesc(int peer) const;  // "rank 1 (host h, 1.2.3.4:5)"

  const EngineOptions opts_;
  const int rank_;
  const int size_;
  BufferCache early_bufs_;                                    // before peers_: their early messages hold its buffers
  std::atomic<uint64_t> early_messages_{0}, early_bytes_{0};  // counters()
  std::vector<Peer> peers_;
  std::unique_ptr<Poller> poller_;
  std::string engine_name_;
  std::thread thread_;

  Inbox inbox_;  // posts, releases, abort and stop from application threads
  std::mutex added_mu_;
  std::vector<std::pair<int, std::vector<UniqueFd>>> added_;  // AddPeer's sockets, until taken
  bool torn_down_ = false;                                    // under added_mu_: AddPeer closes what it is given
  FirstError health_;

  // Application progress (see the top of this file).
  bool app_progress_ = false;  // set by Init
  std::timed_mutex drive_mu_;  // held by the thread driving the engine
  std::atomic<bool> engine_driving_{false};
  std::atomic<bool> app_driving_{false};
  std::atomic<int> app_want_{0};          // application threads waiting for drive_mu_
  std::atomic<int64_t> hand_back_at_{0};  // steady-clock ns: the engine thread may drive
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  bool kicked_ = false;  // guarded by park_mu_

  // The driving thread only (under drive_mu_).
  bool finished_ = false;
  Inbox::Batch batch_;                 // what DrainCommands works on (reused)
  Clock::time_point last_activity_{};  // a request posted or finished, or bytes moved
  uint64_t moved_ = 0;                 // socket reads and writes that moved bytes: a transfer under way
  int64_t active_ = 0;                 // posted requests not yet finished
  bool stopping_ = false;
  bool aborting_ = false;
  Status abort_status_;
  Clock::time_point linger_deadline_{};
  std::vector<Conn*> broken_;  // lost connections whose peer has not failed yet
  std::vector<int> failing_;   // peers whose sockets are shut but not yet released
  RequestDeadlines deadlines_{opts_.timeout_ms};
  Clock::time_point next_peer_check_{}, last_peer_check_{};
  Clock::time_point silence_from_{};  // no peer is silent since before this (CheckPeers)
  std::vector<BasicRequestPtr> sent_scratch_;
};

}  // namespace chorus::transport::tcp
