// The progress engine of one RdmaTransport: a thread that owns the completion queue
// and one RC queue pair per peer, matches announced messages to posted receives
// (the same rules as the TCP engine: transport.h), runs the EAGER and RTS/CTS
// protocols of ctrl.h with credit-based flow control, and turns completion errors,
// timeouts and aborts into request errors. It blocks on the completion channel when
// idle; application threads post through an Inbox.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/early_hold.h"
#include "transport/inbox.h"
#include "transport/matching.h"
#include "transport/rdma/ctrl.h"
#include "transport/rdma/device.h"
#include "transport/rdma/memory.h"
#include "transport/rdma/queue_pair.h"
#include "transport/request.h"

namespace chorus::transport::rdma {

struct EngineOptions {
  int rank = 0;
  int size = 1;
  uint64_t comm_id = 0;
  int64_t timeout_ms = 30 * 60 * 1000;          // per request
  uint32_t eager_bytes = 8192;                  // messages up to this size travel inside a control message
  uint32_t slots = 64;                          // receive slots (credits) per peer
  uint32_t send_wr = 128;                       // send queue depth per peer
  int64_t keepalive_ms = 1000;                  // probe a peer we wait for after this much silence
  int64_t peer_timeout_ms = 10000;              // and declare it gone after this much more
  int64_t poll_us = 0;                          // poll the completion queue this long before sleeping
  uint64_t pause_above = kDefaultPauseAbove;    // early EAGER bytes held from a peer before it is told to PAUSE
  uint64_t resume_below = kDefaultResumeBelow;  // and RESUME
};

class Engine {
 public:
  // Phase 1: completion queue, a queue pair per peer (INIT) with its receive slots
  // posted. `hosts` name the peers in errors.
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<Device> dev, const EngineOptions& opts);
  // Our queue pair for each peer (this rank's entry is empty), to publish.
  std::vector<QpAddress> LocalAddresses() const;
  // Phase 2: each queue pair to RTR and RTS, aimed at the peer's queue pair for us.
  Status Connect(const std::vector<QpAddress>& remote, const std::vector<std::string>& hosts);
  // Phase 3, once every rank connected: starts the thread and exchanges HELLOs (comm
  // id, rank, size) with every peer.
  Status Start(Deadline deadline);
  ~Engine();

  RequestPtr Post(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);
  void Abort(const Status& reason) { inbox_.AbortAndWait(reason); }
  void ReleaseTags(uint64_t first, uint64_t last) { inbox_.Release(first, last); }
  Status health() { return health_.Get(); }
  std::string Describe() const;
  TrafficCounters counters() const {
    return {early_messages_.load(std::memory_order_relaxed), early_bytes_.load(std::memory_order_relaxed)};
  }

 private:
  // An announced (or only received-for) message from one peer with one tag.
  struct InMsg {
    bool announced = false;
    bool eager = false;
    uint64_t len = 0, fp = 0, id = 0;
    std::unique_ptr<char[]> data;  // an unexpected eager message, until its Recv
    uint64_t held = 0;             // bytes of data counted in its peer's `held`
    BasicRequestPtr recv;
    bool discard = false;  // its Recv failed; refuse it when it is announced
  };
  using Tags = TagMatcher<InMsg>;
  using TagState = Tags::TagState;
  // A control message to post on a peer's queue pair, in order.
  struct OutOp {
    CtrlHeader h;
    std::string text;            // NACK/ABORT/DATA_ERROR payload
    const char* data = nullptr;  // EAGER payload (the user's buffer)
    BasicRequestPtr eager;       // an EAGER send: complete once copied
  };
  struct LargeSend {
    BasicRequestPtr req;
    RegistrationCache::Entry* mr = nullptr;
    uint64_t remote_addr = 0;
    uint32_t rkey = 0, imm = 0;
    int writes_left = 0;
  };
  struct LargeRecv {
    BasicRequestPtr req;
    RegistrationCache::Entry* mr = nullptr;
  };
  struct Peer {
    std::string host;
    std::unique_ptr<QueuePair> qp;
    Status error;
    bool hello = false;
    uint32_t credits = 0;  // peer receive slots we may fill
    uint32_t owed = 0;     // our re-posted slots the peer does not know about yet
    uint32_t sq_used = 0;  // our send work requests in flight
    uint32_t rq_posted = 0;
    int pending = 0;  // our unfinished requests with this peer
    bool abort_sent = false;
    bool abort_received = false;  // its ABORT came while we aborted already
    bool credit_queued = false;
    EarlyHold held;       // its early EAGER messages we keep, and whether we said PAUSE
    bool paused = false;  // it told us to PAUSE
    std::vector<uint32_t> free_send_slots;
    std::deque<OutOp> out;
    // Large sends whose CTS came, to be written; apart from `out` so that control
    // messages never wait behind bulk data (see PostNextWrite).
    std::deque<uint32_t> writes;
    Tags tags;  // messages matched to Recvs, and fingerprints per tag group
    Clock::time_point last_heard{}, last_ping{};
    std::unordered_map<uint32_t, LargeSend> sends;  // by send id
  };

  Engine(std::unique_ptr<Device> dev, const EngineOptions& opts);
  Status Init();
  void Loop();
  void Teardown();
  void WaitForCq(int timeout_ms);
  int PollCq();
  void OnCompletion(const ibv_wc& wc);
  void OnControl(int p, const CtrlHeader& h, const char* payload);

  // Matching.
  void Drain();
  void PostSend(const BasicRequestPtr& req);
  void PostRecv(const BasicRequestPtr& req);
  void SelfSend(const BasicRequestPtr& req);
  // Keeps a copy of an eager message from peer p that arrived before its Recv, counted
  // in counters() and (other ranks) in the peer's `held`; ReleaseHeld forgets it.
  void KeepEarly(int p, InMsg& m, const void* payload);
  void ReleaseHeld(int p, InMsg& m);
  void SendFlowControl(int p, CtrlType type);
  // Makes op the RTS of large send `req` (EAGER-sized too, while the peer is paused).
  void MakeRts(int p, OutOp& op, BasicRequestPtr req);
  void OnAnnounce(int p, const CtrlHeader& h, const char* payload);
  void Deliver(int p, uint64_t tag, TagState& ts, uint64_t seq, const char* payload);
  void Refuse(int p, const InMsg& m, const Status& why);
  // Finish, as the matcher (TagMatcher) calls it.
  auto Finisher() {
    return [this](const BasicRequestPtr& r, const Status& st, uint64_t remote_fp) { Finish(r, st, remote_fp); };
  }
  void OnCts(int p, const CtrlHeader& h);
  void Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp = 0);

  // Posting with credits.
  void Queue(int p, OutOp op, bool urgent = false);
  void Flush(int p);
  bool PostCtrl(int p, OutOp& op);
  bool PostNextWrite(int p);
  bool PostWrite(int p, uint32_t id);
  Status RepostSlot(int p, uint32_t slot);
  void Keepalive();

  // Failures.
  void FailPeer(int p, const Status& st);
  void BeginAbort(const Status& reason);
  bool ProgressAbort();
  void FailEverything();
  std::string PeerDesc(int p) const;

  char* RecvSlot(int p, uint32_t i) const;
  char* SendSlot(int p, uint32_t i) const;

  const EngineOptions opts_;
  const int rank_;
  const int size_;
  const size_t slot_bytes_;
  std::unique_ptr<Device> dev_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  unsigned unacked_events_ = 0;
  std::atomic<uint64_t> early_messages_{0}, early_bytes_{0};  // counters()
  std::unique_ptr<char[], void (*)(void*)> pool_{nullptr, nullptr};
  std::unique_ptr<MemoryRegion> pool_mr_;
  RegistrationCache cache_;
  std::vector<Peer> peers_;
  std::thread thread_;
  Inbox inbox_;
  Inbox::Batch batch_;  // what the engine thread drains into (reused)
  RequestDeadlines deadlines_;

  std::mutex start_mu_;  // HELLO hand-shake results, for Start()
  std::condition_variable start_cv_;
  int hellos_ = 0;
  Status start_error_;
  FirstError health_;

  // Engine thread only.
  int64_t active_ = 0;
  bool stopping_ = false;
  bool aborting_ = false;
  bool qps_in_error_ = false;
  Status abort_status_;
  Clock::time_point abort_linger_{}, abort_flush_{};
  uint32_t next_send_id_ = 1;
  uint32_t next_recv_id_ = 1;
  std::unordered_map<uint32_t, LargeRecv> recvs_;  // CTS sent, waiting for the data
};

}  // namespace chorus::transport::rdma
