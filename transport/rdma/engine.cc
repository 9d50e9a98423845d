#include "transport/rdma/engine.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace chorus::transport::rdma {
namespace {

// wr_id: what completed. [kind:8][peer:24][index:32]
enum WrKind : uint64_t { kRecvSlot = 1, kSendSlot = 2, kWrite = 3 };
uint64_t WrId(WrKind k, int peer, uint32_t index) {
  return (static_cast<uint64_t>(k) << 56) | (static_cast<uint64_t>(peer) << 32) | index;
}
WrKind WrKindOf(uint64_t id) { return static_cast<WrKind>(id >> 56); }
int WrPeer(uint64_t id) { return static_cast<int>((id >> 32) & 0xffffff); }
uint32_t WrIndex(uint64_t id) { return static_cast<uint32_t>(id); }

// How long an aborting engine waits for its ABORT messages to be acknowledged, and
// then for the flushed work requests to come back.
constexpr auto kAbortLinger = std::chrono::milliseconds(1000);
constexpr auto kFlushWait = std::chrono::milliseconds(3000);
// One RDMA write carries at most this much (a large message is several writes).
constexpr uint64_t kMaxWrite = 1ull << 30;
constexpr size_t kMaxText = 512;

}  // namespace

Engine::Engine(std::unique_ptr<Device> dev, const EngineOptions& opts)
    : opts_(opts),
      rank_(opts.rank),
      size_(opts.size),
      slot_bytes_((sizeof(CtrlHeader) + opts.eager_bytes + 63) & ~size_t{63}),
      dev_(std::move(dev)),
      cache_(*dev_),
      peers_(static_cast<size_t>(opts.size)),
      deadlines_(opts.timeout_ms) {}

char* Engine::RecvSlot(int p, uint32_t i) const {
  return pool_.get() + (static_cast<size_t>(p) * (opts_.slots + opts_.send_wr) + i) * slot_bytes_;
}
char* Engine::SendSlot(int p, uint32_t i) const { return RecvSlot(p, opts_.slots + i); }

Result<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Device> dev, const EngineOptions& opts) {
  std::unique_ptr<Engine> e(new Engine(std::move(dev), opts));
  CHORUS_RETURN_IF_ERROR(e->Init());
  return e;
}

Status Engine::Init() {
  const Verbs& v = dev_->verbs();
  CHORUS_RETURN_IF_ERROR(inbox_.Init());
  channel_ = v.create_comp_channel(dev_->context());
  if (channel_ == nullptr) return IoError("ibv_create_comp_channel on " + dev_->name(), errno);
  const int flags = fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return IoError("fcntl(completion channel)", errno);
  const int cqe = std::max(16, (size_ - 1) * static_cast<int>(opts_.slots + opts_.send_wr) + 16);
  cq_ = v.create_cq(dev_->context(), cqe, nullptr, channel_, 0);
  if (cq_ == nullptr) return IoError("ibv_create_cq(" + std::to_string(cqe) + ") on " + dev_->name(), errno);
  // Control slots of every peer in one registered block: receive slots, then send slots.
  const size_t bytes = static_cast<size_t>(size_) * (opts_.slots + opts_.send_wr) * slot_bytes_;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, std::max<size_t>(bytes, 4096)) != 0) return IoError("posix_memalign", ENOMEM);
  pool_ = std::unique_ptr<char[], void (*)(void*)>(static_cast<char*>(mem), std::free);
  Result<std::unique_ptr<MemoryRegion>> mr =
      MemoryRegion::Register(*dev_, mem, std::max<size_t>(bytes, 4096), IBV_ACCESS_LOCAL_WRITE);
  if (!mr.ok()) return mr.status();
  pool_mr_ = std::move(mr.value());
  QpCaps caps;
  caps.send_wr = opts_.send_wr;
  caps.recv_wr = opts_.slots;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[p];
    Result<std::unique_ptr<QueuePair>> qp = QueuePair::Create(*dev_, cq_, caps, PeerDesc(p));
    if (!qp.ok()) return qp.status();
    peer.qp = std::move(qp.value());
    peer.credits = opts_.slots;
    for (uint32_t i = 0; i < opts_.send_wr; ++i) peer.free_send_slots.push_back(opts_.send_wr - 1 - i);
    // Receives may be posted in INIT: the slots are ready before any peer can send.
    for (uint32_t i = 0; i < opts_.slots; ++i) CHORUS_RETURN_IF_ERROR(RepostSlot(p, i));
  }
  return Status::Ok();
}

std::vector<QpAddress> Engine::LocalAddresses() const {
  std::vector<QpAddress> out(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (peers_[p].qp) out[p] = peers_[p].qp->local();
  }
  return out;
}

Status Engine::Connect(const std::vector<QpAddress>& remote, const std::vector<std::string>& hosts) {
  for (int p = 0; p < size_ && p < static_cast<int>(hosts.size()); ++p) peers_[p].host = hosts[p];
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    CHORUS_RETURN_IF_ERROR(peers_[p].qp->Connect(remote[p]));
  }
  return Status::Ok();
}

Status Engine::Start(Deadline deadline) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    OutOp op;
    op.h.type = static_cast<uint16_t>(CtrlType::kHello);
    op.h.seq = opts_.comm_id;
    op.h.len = static_cast<uint64_t>(size_);
    op.h.id = static_cast<uint64_t>(rank_);
    Queue(p, std::move(op));
  }
  thread_ = std::thread(&Engine::Loop, this);
  std::unique_lock<std::mutex> lock(start_mu_);
  const bool done =
      start_cv_.wait_until(lock, deadline.at(), [this] { return hellos_ == size_ - 1 || !start_error_.ok(); });
  if (!start_error_.ok()) return start_error_;
  if (done) return Status::Ok();
  std::string missing;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && !peers_[p].hello) missing += (missing.empty() ? "" : ", ") + PeerDesc(p);
  }
  return TimeoutError("rank " + std::to_string(rank_) + ": no RDMA hello from " + missing + " before the deadline");
}

Engine::~Engine() {
  if (thread_.joinable()) {
    inbox_.RequestStop();
    thread_.join();
  } else {
    Teardown();
  }
}

RequestPtr Engine::Post(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                        uint64_t fingerprint) {
  // Waiting threads do not spin here: spinning threads take the CPUs that a software
  // provider's work, done in the engine thread, needs (docs/design/rdma_transport.md).
  auto req = std::make_shared<BasicRequest>(kind, rank_, peer, tag, buf, bytes, fingerprint);
  inbox_.Post(req);
  return req;
}

std::string Engine::Describe() const {
  return "rdma " + dev_->Describe() + ", eager up to " + std::to_string(opts_.eager_bytes) + " B, " +
         std::to_string(opts_.slots) + " credits per peer";
}

std::string Engine::PeerDesc(int p) const {
  return "rank " + std::to_string(p) + (peers_[p].host.empty() ? "" : " (host " + peers_[p].host + ")");
}

// ---- The loop ----

void Engine::Loop() {
  for (;;) {
    Drain();
    int got = PollCq();
    for (int p = 0; p < size_; ++p) {
      Flush(p);
      got += PostNextWrite(p) ? 1 : 0;
    }
    if (!aborting_) {
      if (BasicRequestPtr r = deadlines_.Expired()) {
        // A request past its deadline may still be written by the device: the only
        // safe way to give its buffer back is to stop the whole transport.
        BeginAbort(TimeoutError("rank " + std::to_string(rank_) + ": " + r->Describe() + " with " +
                                PeerDesc(r->peer()) + " did not finish within " +
                                std::to_string(deadlines_.timeout_ms()) + " ms"));
      }
      Keepalive();
    }
    if (!aborting_ && stopping_) {
      if (active_ == 0) break;
      BeginAbort(AbortedError("transport destroyed with " + std::to_string(active_) + " requests pending"));
    }
    if (aborting_ && ProgressAbort()) break;
    if (got > 0) continue;
    int timeout = deadlines_.NextTimeoutMs();
    if (active_ > 0)
      timeout = timeout < 0 ? static_cast<int>(opts_.keepalive_ms) : std::min<int>(timeout, opts_.keepalive_ms);
    if (aborting_) timeout = 10;
    WaitForCq(timeout);
  }
  Teardown();
}

void Engine::WaitForCq(int timeout_ms) {
  // Optionally poll a little before sleeping: a sleeping thread (and, in a VM, a
  // halted vCPU) costs a wake-up per message. Off by default (ranks share cores).
  if (opts_.poll_us > 0 && !aborting_) {
    const auto until = Clock::now() + std::chrono::microseconds(opts_.poll_us);
    ibv_wc wc;
    do {
      if (inbox_.HasWork()) return;
      if (ibv_poll_cq(cq_, 1, &wc) > 0) return OnCompletion(wc);
    } while (Clock::now() < until);
  }
  // Arm the notification, then look once more: a completion that arrived in between
  // would otherwise wait for the next event.
  if (ibv_req_notify_cq(cq_, 0) != 0) {
    if (!aborting_) BeginAbort(IoError("rank " + std::to_string(rank_) + ": ibv_req_notify_cq", errno));
    return;
  }
  if (!inbox_.BeginSleep()) return;
  ibv_wc wc;
  const int n = ibv_poll_cq(cq_, 1, &wc);
  if (n > 0) {
    inbox_.EndSleep();
    OnCompletion(wc);
    return;
  }
  pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {inbox_.wake_fd(), POLLIN, 0}};
  const int rc = poll(fds, 2, timeout_ms);
  inbox_.EndSleep();
  if (rc <= 0) return;
  if (fds[1].revents & POLLIN) inbox_.ConsumeWake();
  if (fds[0].revents & POLLIN) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (dev_->verbs().get_cq_event(channel_, &cq, &ctx) == 0 && ++unacked_events_ >= 64) {
      dev_->verbs().ack_cq_events(cq_, unacked_events_);
      unacked_events_ = 0;
    }
  }
}

int Engine::PollCq() {
  ibv_wc wc[32];
  int total = 0;
  for (int round = 0; round < 8; ++round) {
    const int n = ibv_poll_cq(cq_, 32, wc);
    if (n < 0) {
      if (!aborting_) BeginAbort(InternalError("rank " + std::to_string(rank_) + ": ibv_poll_cq failed"));
      return total;
    }
    for (int i = 0; i < n; ++i) OnCompletion(wc[i]);
    total += n;
    if (n < 32) break;
  }
  return total;
}

void Engine::Drain() {
  Inbox::Batch& b = batch_;
  inbox_.Drain(&b);
  for (BasicRequestPtr& req : b.posts) {
    ++active_;
    deadlines_.Track(req);
    Peer& peer = peers_[req->peer()];
    ++peer.pending;
    if (aborting_) {
      Finish(req, abort_status_);
    } else if (!peer.error.ok()) {
      Finish(req, peer.error);
    } else {
      req->kind() == BasicRequest::Kind::kSend ? PostSend(req) : PostRecv(req);
    }
  }
  for (const auto& [first, last] : b.releases) {
    for (Peer& p : peers_) p.tags.Release(first, last);
    cache_.ReleaseGroups(TagGroup(first), TagGroup(last));
  }
  if (b.abort && !aborting_) BeginAbort(b.abort_reason);
  if (b.stop) stopping_ = true;
}

void Engine::Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp) {
  if (!req->Complete(st, remote_fp)) return;
  --active_;
  --peers_[req->peer()].pending;
}

// ---- Sends and receives ----

void Engine::PostSend(const BasicRequestPtr& req) {
  const int p = req->peer();
  if (p == rank_) return SelfSend(req);
  OutOp op;
  op.h.tag = req->tag();
  op.h.seq = peers_[p].tags[req->tag()].next_send_seq++;
  op.h.len = req->bytes();
  op.h.fp = req->fingerprint();
  if (req->bytes() <= opts_.eager_bytes && !(peers_[p].paused && req->bytes() > 0)) {
    op.h.type = static_cast<uint16_t>(CtrlType::kEager);
    op.data = req->buf();
    op.eager = req;
  } else {
    MakeRts(p, op, req);
  }
  Queue(p, std::move(op));
}

void Engine::MakeRts(int p, OutOp& op, BasicRequestPtr req) {
  const uint32_t id = next_send_id_++;
  if (next_send_id_ == 0) next_send_id_ = 1;
  peers_[p].sends[id].req = std::move(req);
  op.eager.reset();
  op.data = nullptr;
  op.h.type = static_cast<uint16_t>(CtrlType::kRts);
  op.h.id = id;
}

void Engine::SelfSend(const BasicRequestPtr& req) {
  TagState& ts = peers_[rank_].tags[req->tag()];
  const uint64_t seq = ts.next_send_seq++;
  InMsg& m = ts.msgs[seq];
  m.announced = true;
  m.eager = true;
  m.len = req->bytes();
  m.fp = req->fingerprint();
  if (m.recv || m.discard) {
    Deliver(rank_, req->tag(), ts, seq, req->buf());
  } else if (m.len > 0) {
    KeepEarly(rank_, m, req->buf());
  }
  Finish(req, Status::Ok());
}

void Engine::PostRecv(const BasicRequestPtr& req) {
  const int p = req->peer();
  // Failed at once or not, an announced message is delivered (or refused) now.
  auto posted = peers_[p].tags.PostRecv(rank_, p, req, Finisher());
  if (posted.msg.announced) Deliver(p, req->tag(), posted.ts, posted.seq, nullptr);
}

void Engine::OnAnnounce(int p, const CtrlHeader& h, const char* payload) {
  Peer& peer = peers_[p];
  TagState& ts = peer.tags[h.tag];
  InMsg& m = ts.msgs[h.seq];
  m.announced = true;
  m.eager = h.type == static_cast<uint16_t>(CtrlType::kEager);
  m.len = h.len;
  m.fp = h.fp;
  m.id = h.id;
  // Refused here, a discarded message that was announced is done with.
  peer.tags.Arrived(rank_, p, h.tag, h.fp, Finisher(), [&](uint64_t tag, const InMsg& d) {
    if (!d.announced) return false;
    Refuse(p, d, GroupMismatch(rank_, p, tag));
    return true;
  });
  auto it = ts.msgs.find(h.seq);
  if (it == ts.msgs.end()) return;  // refused: another call's message in its group
  if (it->second.recv || it->second.discard) return Deliver(p, h.tag, ts, h.seq, payload);
  if (m.eager && m.len > 0) KeepEarly(p, m, payload);  // unexpected: keep a copy until the Recv is posted
}

void Engine::KeepEarly(int p, InMsg& m, const void* payload) {
  early_messages_.fetch_add(1, std::memory_order_relaxed);
  early_bytes_.fetch_add(m.len, std::memory_order_relaxed);
  m.data.reset(new char[m.len]);
  std::memcpy(m.data.get(), payload, m.len);
  if (p == rank_) return;  // our own sends: copied, never paused
  m.held = m.len;
  if (peers_[p].held.Add(m.len, opts_.pause_above)) SendFlowControl(p, CtrlType::kPause);
}

void Engine::ReleaseHeld(int p, InMsg& m) {
  if (m.held == 0) return;
  const uint64_t bytes = m.held;
  m.held = 0;
  if (peers_[p].held.Remove(bytes, opts_.resume_below)) SendFlowControl(p, CtrlType::kResume);
}

void Engine::SendFlowControl(int p, CtrlType type) {
  if (aborting_ || !peers_[p].error.ok()) return;
  OutOp op;
  op.h.type = static_cast<uint16_t>(type);
  Queue(p, std::move(op), /*urgent=*/true);
}

void Engine::Deliver(int p, uint64_t tag, TagState& ts, uint64_t seq, const char* payload) {
  auto it = ts.msgs.find(seq);
  InMsg& m = it->second;
  if (m.discard) {
    Refuse(p, m, GroupMismatch(rank_, p, tag));
    ReleaseHeld(p, m);
    ts.msgs.erase(it);
    return;
  }
  BasicRequestPtr recv = m.recv;
  Status st = CheckMatch(rank_, p, recv->tag(), m.len, m.fp, *recv);
  if (!st.ok()) {
    Finish(recv, st, m.fp);
    Refuse(p, m, st);
  } else if (m.eager) {
    if (m.len > 0) std::memcpy(recv->buf(), payload ? payload : m.data.get(), m.len);
    Finish(recv, Status::Ok());
    ReleaseHeld(p, m);
  } else {
    // Large: tell the sender where to write.
    Result<RegistrationCache::Entry*> mr =
        cache_.Acquire(recv->buf(), recv->bytes(), TagGroup(recv->tag()), IsCollectiveTag(recv->tag()));
    if (!mr.ok()) {
      Status why = mr.status().WithContext("rank " + std::to_string(rank_) + ": " + recv->Describe());
      Finish(recv, why);
      Refuse(p, m, why);
    } else {
      const uint32_t id = next_recv_id_++;
      if (next_recv_id_ == 0) next_recv_id_ = 1;
      recvs_[id] = LargeRecv{recv, mr.value()};
      OutOp op;
      op.h.type = static_cast<uint16_t>(CtrlType::kCts);
      op.h.id = m.id;
      op.h.addr = reinterpret_cast<uintptr_t>(recv->buf());
      op.h.rkey = mr.value()->mr->rkey();
      op.h.imm = id;
      Queue(p, std::move(op));
    }
  }
  ts.msgs.erase(it);
}

void Engine::Refuse(int p, const InMsg& m, const Status& why) {
  if (m.eager || p == rank_) return;  // the sender is done already
  OutOp op;
  op.h.type = static_cast<uint16_t>(CtrlType::kNack);
  op.h.id = m.id;
  op.h.len = static_cast<uint64_t>(why.code());
  op.text = why.message().substr(0, kMaxText);
  Queue(p, std::move(op));
}

void Engine::OnCts(int p, const CtrlHeader& h) {
  Peer& peer = peers_[p];
  auto it = peer.sends.find(static_cast<uint32_t>(h.id));
  if (it == peer.sends.end())
    return FailPeer(p, ProtocolError(PeerDesc(p) + " sent a CTS for unknown send " + std::to_string(h.id)));
  LargeSend& s = it->second;
  Result<RegistrationCache::Entry*> mr =
      cache_.Acquire(s.req->buf(), s.req->bytes(), TagGroup(s.req->tag()), IsCollectiveTag(s.req->tag()));
  if (!mr.ok()) {
    Status why = mr.status().WithContext("rank " + std::to_string(rank_) + ": " + s.req->Describe());
    Finish(s.req, why);
    peer.sends.erase(it);
    OutOp op;  // the receiver waits for data that will not come: tell it why
    op.h.type = static_cast<uint16_t>(CtrlType::kDataError);
    op.h.imm = h.imm;
    op.text = why.message().substr(0, kMaxText);
    return Queue(p, std::move(op));
  }
  s.mr = mr.value();
  s.remote_addr = h.addr;
  s.rkey = h.rkey;
  s.imm = h.imm;
  peer.writes.push_back(it->first);
}

// ---- Control messages in ----

void Engine::OnControl(int p, const CtrlHeader& h, const char* payload) {
  Peer& peer = peers_[p];
  peer.credits += h.credits;
  const std::string text(payload, std::min<size_t>(h.payload, kMaxText));
  switch (static_cast<CtrlType>(h.type)) {
    case CtrlType::kHello: {
      if (h.seq != opts_.comm_id || h.len != static_cast<uint64_t>(size_) || h.id != static_cast<uint64_t>(p)) {
        char ids[128];
        std::snprintf(ids, sizeof(ids), "%llx (size %llu), expected %llx (size %d)",
                      static_cast<unsigned long long>(h.seq), static_cast<unsigned long long>(h.len),
                      static_cast<unsigned long long>(opts_.comm_id), size_);
        Status st = MismatchError("rank " + std::to_string(rank_) + ": the queue pair of " + PeerDesc(p) +
                                  " reached rank " + std::to_string(h.id) + " of communicator " + ids);
        {
          std::lock_guard<std::mutex> lock(start_mu_);
          if (start_error_.ok()) start_error_ = st;
          start_cv_.notify_all();
        }
        if (!aborting_) BeginAbort(st);
      } else if (!peer.hello) {
        std::lock_guard<std::mutex> lock(start_mu_);
        peer.hello = true;
        ++hellos_;
        start_cv_.notify_all();
      }
      return;
    }
    case CtrlType::kEager:
    case CtrlType::kRts:
      if (h.type == static_cast<uint16_t>(CtrlType::kEager) && h.len > opts_.eager_bytes) {
        return FailPeer(p,
                        ProtocolError(PeerDesc(p) + " sent an eager message of " + std::to_string(h.len) + " bytes"));
      }
      return OnAnnounce(p, h, payload);
    case CtrlType::kCts: return OnCts(p, h);
    case CtrlType::kNack: {
      auto it = peer.sends.find(static_cast<uint32_t>(h.id));
      if (it == peer.sends.end()) return;
      BasicRequestPtr req = it->second.req;
      peer.sends.erase(it);
      const auto code =
          h.len == static_cast<uint64_t>(StatusCode::kMismatch) ? StatusCode::kMismatch : StatusCode::kPeerFailed;
      return Finish(req, Status(code, "rank " + std::to_string(rank_) + ": " + req->Describe() + " refused by " +
                                          PeerDesc(p) + ": " + text));
    }
    case CtrlType::kDataError: {
      auto it = recvs_.find(h.imm);
      if (it == recvs_.end()) return;
      LargeRecv r = it->second;
      recvs_.erase(it);
      cache_.Release(r.mr);
      return Finish(r.req, PeerFailed(PeerDesc(p) + " could not send " + r.req->Describe() + ": " + text));
    }
    case CtrlType::kPing: {
      OutOp op;
      op.h.type = static_cast<uint16_t>(CtrlType::kPong);
      return Queue(p, std::move(op), /*urgent=*/true);
    }
    case CtrlType::kCredit:
    case CtrlType::kPong: return;
    case CtrlType::kPause:
    case CtrlType::kResume: peer.paused = h.type == static_cast<uint16_t>(CtrlType::kPause); return;
    case CtrlType::kAbort: {
      // While we abort already, the peer's ABORT is most likely the echo of ours: our
      // reason stands for every request, and we stop waiting for it to take ours.
      if (aborting_) {
        peer.abort_received = true;
        return;
      }
      Status st = PeerFailed("rank " + std::to_string(p) + (peer.host.empty() ? "" : " (host " + peer.host + ")") +
                             " aborted: " + text);
      peer.error = st;
      // The peer's communicator is dead, so every call on this one is doomed as well.
      BeginAbort(st);
      return;
    }
  }
  FailPeer(p, ProtocolError(PeerDesc(p) + " sent control message type " + std::to_string(h.type)));
}

// ---- Completions ----

void Engine::OnCompletion(const ibv_wc& wc) {
  const int p = WrPeer(wc.wr_id);
  if (p >= size_ || p == rank_) return;
  Peer& peer = peers_[p];
  const WrKind kind = WrKindOf(wc.wr_id);
  if (kind == kRecvSlot) {
    --peer.rq_posted;
  } else {
    --peer.sq_used;
    if (kind == kSendSlot) peer.free_send_slots.push_back(WrIndex(wc.wr_id));
  }
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR && (aborting_ || !peer.error.ok() || qps_in_error_)) return;
    const char* what = kind == kRecvSlot ? "receive" : kind == kWrite ? "RDMA write" : "send";
    std::string hint = wc.status == IBV_WC_RETRY_EXC_ERR ? " (the peer is unreachable or gone)" : "";
    return FailPeer(p, PeerFailed("rank " + std::to_string(rank_) + ": " + what + " to " + PeerDesc(p) +
                                  " failed: " + dev_->verbs().wc_status_str(wc.status) + hint + " (verbs status " +
                                  std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) + ")"));
  }
  if (kind == kRecvSlot) peer.last_heard = Clock::now();  // only what the peer sent proves it alive
  if (kind == kWrite) {
    auto it = peer.sends.find(WrIndex(wc.wr_id));
    if (it == peer.sends.end() || --it->second.writes_left > 0) return;
    cache_.Release(it->second.mr);
    BasicRequestPtr req = it->second.req;
    peer.sends.erase(it);
    return Finish(req, Status::Ok());
  }
  if (kind != kRecvSlot) return;
  const uint32_t slot = WrIndex(wc.wr_id);
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    auto it = recvs_.find(ntohl(wc.imm_data));
    if (it != recvs_.end()) {
      cache_.Release(it->second.mr);
      BasicRequestPtr req = it->second.req;
      recvs_.erase(it);
      Finish(req, Status::Ok());
    }
  } else {
    CtrlHeader h;
    const char* buf = RecvSlot(p, slot);
    if (wc.byte_len < sizeof(h)) return FailPeer(p, ProtocolError(PeerDesc(p) + " sent a short control message"));
    std::memcpy(&h, buf, sizeof(h));
    if (h.magic != CtrlHeader::kMagic || sizeof(h) + h.payload > wc.byte_len) {
      return FailPeer(p, ProtocolError(PeerDesc(p) + " sent a malformed control message"));
    }
    OnControl(p, h, buf + sizeof(h));
  }
  if (aborting_ && qps_in_error_) return;
  Status st = RepostSlot(p, slot);
  if (!st.ok()) return FailPeer(p, st);
  // Credits normally ride on the next header we send; when nothing can go (nothing
  // to say, or blocked for want of the peer's credits) a CREDIT message carries them.
  if (++peer.owed >= opts_.slots / 2 && !peer.credit_queued && (peer.out.empty() || peer.credits <= 1)) {
    peer.credit_queued = true;
    OutOp op;
    op.h.type = static_cast<uint16_t>(CtrlType::kCredit);
    Queue(p, std::move(op), /*urgent=*/true);
  }
}

Status Engine::RepostSlot(int p, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(RecvSlot(p, slot)), static_cast<uint32_t>(slot_bytes_), pool_mr_->lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = WrId(kRecvSlot, p, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(peers_[p].qp->qp(), &wr, &bad);
  if (rc != 0) return IoError("rank " + std::to_string(rank_) + ": ibv_post_recv for " + PeerDesc(p), rc);
  ++peers_[p].rq_posted;
  return Status::Ok();
}

// ---- Posting, with credits ----

void Engine::Queue(int p, OutOp op, bool urgent) {
  if (urgent) {
    peers_[p].out.push_front(std::move(op));
  } else {
    peers_[p].out.push_back(std::move(op));
  }
  Flush(p);
}

void Engine::Flush(int p) {
  Peer& peer = peers_[p];
  if (!peer.qp || !peer.error.ok() || qps_in_error_) return;
  while (!peer.out.empty()) {
    OutOp& op = peer.out.front();
    const auto type = static_cast<CtrlType>(op.h.type);
    if (type == CtrlType::kCredit) {
      peer.credit_queued = false;
      if (peer.owed == 0) {  // an earlier header carried them already
        peer.out.pop_front();
        continue;
      }
    }
    // The last credit is kept for CREDIT and ABORT messages, which unblock the peer.
    const uint32_t reserve = type == CtrlType::kCredit || type == CtrlType::kAbort ? 0 : 1;
    if (peer.credits <= reserve) return;
    if (type == CtrlType::kEager && peer.paused && op.h.len > 0) {
      MakeRts(p, op, std::move(op.eager));  // queued before the peer said PAUSE
    }
    if (!PostCtrl(p, op)) return;
    peer.out.pop_front();
    if (!peer.error.ok()) return;
  }
}

// One write per peer per turn of the loop, after the control messages. A provider may
// do the whole transfer inside ibv_post_send (Soft-RoCE does, in the posting thread):
// posting the queued writes back to back would keep CTS and RTS messages, and with
// them the peer's next transfer, waiting for all of them. Returns whether it posted.
bool Engine::PostNextWrite(int p) {
  Peer& peer = peers_[p];
  if (peer.writes.empty() || !peer.qp || !peer.error.ok() || qps_in_error_ || aborting_) return false;
  if (peer.credits <= 1) return false;  // the last credit is kept (see Flush)
  if (!PostWrite(p, peer.writes.front())) return false;
  peer.writes.pop_front();
  return true;
}

bool Engine::PostCtrl(int p, OutOp& op) {
  Peer& peer = peers_[p];
  if (peer.free_send_slots.empty() || peer.sq_used >= opts_.send_wr) return false;
  const uint32_t slot = peer.free_send_slots.back();
  peer.free_send_slots.pop_back();
  char* buf = SendSlot(p, slot);
  const bool eager = op.eager != nullptr;
  op.h.payload = static_cast<uint32_t>(eager ? op.h.len : op.text.size());
  op.h.credits = peer.owed;
  std::memcpy(buf, &op.h, sizeof(op.h));
  if (op.h.payload > 0) std::memcpy(buf + sizeof(op.h), eager ? op.data : op.text.data(), op.h.payload);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(sizeof(op.h) + op.h.payload), pool_mr_->lkey()};
  ibv_send_wr wr{};
  wr.wr_id = WrId(kSendSlot, p, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(peer.qp->qp(), &wr, &bad);
  if (rc != 0) {
    peer.free_send_slots.push_back(slot);
    FailPeer(p, IoError("rank " + std::to_string(rank_) + ": ibv_post_send to " + PeerDesc(p), rc));
    return true;  // dropped: the peer's failure fails its requests
  }
  peer.owed = 0;
  --peer.credits;
  ++peer.sq_used;
  if (static_cast<CtrlType>(op.h.type) == CtrlType::kAbort) peer.abort_sent = true;
  if (eager) Finish(op.eager, Status::Ok());  // its bytes are in our slot now
  return true;
}

bool Engine::PostWrite(int p, uint32_t id) {
  Peer& peer = peers_[p];
  auto it = peer.sends.find(id);
  if (it == peer.sends.end()) return true;  // failed meanwhile
  LargeSend& s = it->second;
  const uint64_t bytes = s.req->bytes();
  const uint64_t max = std::min<uint64_t>(kMaxWrite, dev_->max_message_bytes());
  const int parts = static_cast<int>((bytes + max - 1) / max);
  if (peer.sq_used + static_cast<uint32_t>(parts) > opts_.send_wr) return false;
  std::vector<ibv_sge> sges(static_cast<size_t>(parts));
  std::vector<ibv_send_wr> wrs(static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) {
    const uint64_t off = static_cast<uint64_t>(i) * max, len = std::min(max, bytes - off);
    sges[i] = {reinterpret_cast<uintptr_t>(s.req->buf() + off), static_cast<uint32_t>(len), s.mr->mr->lkey()};
    ibv_send_wr& wr = wrs[i];
    wr.wr_id = WrId(kWrite, p, id);
    wr.sg_list = &sges[i];
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = s.remote_addr + off;
    wr.wr.rdma.rkey = s.rkey;
    wr.next = i + 1 < parts ? &wrs[i + 1] : nullptr;
    wr.opcode = i + 1 < parts ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
    if (i + 1 == parts) wr.imm_data = htonl(s.imm);  // the last write completes the receive
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(peer.qp->qp(), wrs.data(), &bad);
  if (rc != 0) {
    FailPeer(p, IoError("rank " + std::to_string(rank_) + ": RDMA write to " + PeerDesc(p), rc));
    return true;
  }
  s.writes_left = parts;
  --peer.credits;
  peer.sq_used += static_cast<uint32_t>(parts);
  return true;
}

void Engine::Keepalive() {
  // A silent peer we wait for gets a PING; its engine answers PONG. A peer that stays
  // silent past peer_timeout_ms (process gone, machine gone, engine stuck) fails with
  // its name, so a vanished peer is never a hang, whatever the verbs provider reports.
  const auto now = Clock::now();
  const auto every = std::chrono::milliseconds(opts_.keepalive_ms);
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    if (p == rank_ || peer.pending == 0 || !peer.error.ok()) continue;
    if (now - peer.last_heard < every) continue;
    if (peer.last_ping > peer.last_heard) {  // a probe is out
      if (now - peer.last_ping < std::chrono::milliseconds(opts_.peer_timeout_ms)) continue;
      FailPeer(p, PeerFailed("rank " + std::to_string(rank_) + ": " + PeerDesc(p) + " did not answer for " +
                             std::to_string(opts_.peer_timeout_ms) +
                             " ms while requests wait for it (process or host gone?)"));
      continue;
    }
    peer.last_ping = now;
    OutOp op;
    op.h.type = static_cast<uint16_t>(CtrlType::kPing);
    Queue(p, std::move(op), /*urgent=*/true);
  }
}

// ---- Failures and aborts ----

void Engine::FailPeer(int p, const Status& st) {
  Peer& peer = peers_[p];
  if (!peer.error.ok()) return;
  peer.error = st;
  health_.Set(st);
  if (peer.pending > 0 || aborting_) {
    CHORUS_WARN(st.message());
    // Requests to other peers belong to the same calls: fail them too (and tell those
    // peers) rather than leave them waiting for data that depends on the lost rank.
    if (!aborting_) BeginAbort(st);
  } else {
    CHORUS_INFO(st.message());
  }
  peer.qp->ToError();
}

void Engine::BeginAbort(const Status& reason) {
  aborting_ = true;
  abort_status_ = reason;
  health_.Set(reason);
  inbox_.Close(reason);  // from now on posts fail at once with the reason
  {
    std::lock_guard<std::mutex> lock(start_mu_);
    if (start_error_.ok() && hellos_ < size_ - 1) start_error_ = reason;
    start_cv_.notify_all();
  }
  abort_linger_ = Clock::now() + kAbortLinger;
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    if (p == rank_ || !peer.error.ok()) continue;
    // What has not been posted yet is dropped; the ABORT goes next.
    for (OutOp& op : peer.out) {
      if (op.eager) Finish(op.eager, reason);
    }
    peer.out.clear();
    peer.writes.clear();  // their sends fail with everything else
    OutOp op;
    op.h.type = static_cast<uint16_t>(CtrlType::kAbort);
    op.text = reason.message().substr(0, kMaxText);
    Queue(p, std::move(op));
  }
}

bool Engine::ProgressAbort() {
  const auto now = Clock::now();
  // 1. Give the ABORT messages a bounded time to be acknowledged.
  if (!qps_in_error_) {
    bool sending = false;
    for (int p = 0; p < size_; ++p) {
      const Peer& peer = peers_[p];
      if (p == rank_ || !peer.error.ok() || peer.abort_received) continue;
      if (!peer.abort_sent || peer.sq_used > 0) sending = true;
    }
    if (sending && now < abort_linger_) return false;
    // 2. Every queue pair to ERROR: posted work comes back flushed, and the peers'
    // writes into our buffers are refused from now on.
    for (Peer& peer : peers_) {
      if (peer.qp) peer.qp->ToError();
    }
    qps_in_error_ = true;
    abort_flush_ = now + kFlushWait;
  }
  // 3. Wait for the flushed work requests: until they are back the device may still
  // read or write our buffers.
  bool busy = false;
  for (const Peer& peer : peers_) busy = busy || peer.sq_used > 0 || peer.rq_posted > 0;
  if (busy && now < abort_flush_) return false;
  if (busy) CHORUS_WARN("rank " << rank_ << ": RDMA work requests not flushed within " << kFlushWait.count() << " ms");
  // 4. Deregister user buffers and fail everything still posted.
  FailEverything();
  return true;
}

void Engine::FailEverything() {
  cache_.Clear();
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    const Status& st = peer.error.ok() ? abort_status_ : peer.error;
    for (auto& [id, s] : peer.sends) Finish(s.req, st);
    peer.sends.clear();
    for (OutOp& op : peer.out) {
      if (op.eager) Finish(op.eager, st);
    }
    peer.out.clear();
    peer.writes.clear();
    peer.tags.FailAll(st, Finisher());
  }
  for (auto& [id, r] : recvs_) Finish(r.req, abort_status_);
  recvs_.clear();
  for (const BasicRequestPtr& r : deadlines_.TakeAll()) Finish(r, abort_status_);
}

void Engine::Teardown() {
  // Orderly or not, nothing may touch memory once the resources go: queue pairs to
  // ERROR and wait (bounded) for the flushes before destroying anything.
  if (!qps_in_error_) {
    for (Peer& peer : peers_) {
      if (peer.qp) peer.qp->ToError();
    }
    qps_in_error_ = true;
    const auto until = Clock::now() + kFlushWait;
    for (;;) {
      bool busy = false;
      for (const Peer& peer : peers_) busy = busy || peer.sq_used > 0 || peer.rq_posted > 0;
      if (!busy || Clock::now() >= until || !cq_) break;
      if (PollCq() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (!aborting_) {  // an abort failed everything already (ProgressAbort)
    abort_status_ = AbortedError("transport closed");
    FailEverything();
  }
  inbox_.Exit(abort_status_);
  for (Peer& peer : peers_) peer.qp.reset();
  if (cq_) {
    if (unacked_events_) dev_->verbs().ack_cq_events(cq_, unacked_events_);
    dev_->verbs().destroy_cq(cq_);
    cq_ = nullptr;
  }
  if (channel_) {
    dev_->verbs().destroy_comp_channel(channel_);
    channel_ = nullptr;
  }
  pool_mr_.reset();
}

}  // namespace chorus::transport::rdma
