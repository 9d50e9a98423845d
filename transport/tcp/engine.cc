#include "transport/tcp/engine.h"

#include <sched.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "transport/matching.h"

namespace chorus::transport::tcp {
namespace {

// How long an aborting engine keeps trying to deliver its ABORT frames.
constexpr auto kAbortLinger = std::chrono::milliseconds(1000);
// How long a connection whose send failed is still read (for the peer's ABORT frame).
constexpr auto kReadAfterLoss = std::chrono::milliseconds(500);
// Application progress: how long after the last application thread stopped driving the
// engine thread takes over again.
constexpr auto kHandBack = std::chrono::milliseconds(2);
// An application thread that cannot drive (another one does) looks again this often.
constexpr auto kOtherDriverLook = std::chrono::microseconds(200);
// A thread waiting for the lock looks at its own request this often.
constexpr auto kLockLook = std::chrono::microseconds(50);

// timed_mutex::try_lock_for, except under ThreadSanitizer: there, GCC 12's libstdc++
// takes the lock with pthread_mutex_clocklock, which its libtsan does not intercept, so
// every access under the lock looked like a race (836 reports in one test, none with
// this). A try_lock and a sleep is what TSan sees.
bool TryLockFor(std::timed_mutex& mu, std::chrono::microseconds look) {
#if defined(__SANITIZE_THREAD__)
  if (mu.try_lock()) return true;
  std::this_thread::sleep_for(look);
  return mu.try_lock();
#else
  return mu.try_lock_for(look);
#endif
}
// Point-to-point messages (collectives pace themselves, algos/credits.h) of this size
// and more wait until the receiver has posted their Recv (READY), as on RDMA and with
// Gloo or NCCL: memory held for messages nobody receives yet stays bounded, and a
// large message is never copied twice. Smaller ones go at once.
constexpr uint64_t kRendezvousBytes = 256 << 10;
bool Rendezvous(uint64_t tag, uint64_t bytes) { return !IsCollectiveTag(tag) && bytes >= kRendezvousBytes; }
// A receiver holding more than pause_above (CHORUS_EARLY_PAUSE, 64 MiB) of a peer's
// early messages tells it to PAUSE (send everything by rendezvous) until it holds less
// than resume_below (CHORUS_EARLY_RESUME, 16 MiB; early_hold.h): a sender that runs
// ahead of its receiver (a stream of sends into a few posted receives) would otherwise
// fill the receiver's memory (docs/design/flow_control.md).

// Messages smaller than this all go on a peer's first socket: a small message costs
// less on a connection that carried the last one (docs/design/tcp_transport.md), and
// spreading only pays where messages are large enough to fill a socket. Bytes.
constexpr uint64_t kOneSocketBelow = 4096;

// Liveness (CheckPeers): a peer we wait on that has been silent for a part of the peer
// timeout gets a PING; the peer's state is looked at that many times per timeout.
constexpr int kPingAfterParts = 3;
constexpr int kChecksPerTimeout = 10;

std::string ErrnoText(int64_t res, int64_t peer_timeout_ms) {
  if (res == 0) return "closed by the peer (EOF)";
  std::string s = std::strerror(static_cast<int>(-res));
  // TCP_USER_TIMEOUT or keepalive gave up (socket_util.h): data or probes unanswered.
  if (res == -ETIMEDOUT) {
    s += " (nothing acknowledged for CHORUS_PEER_TIMEOUT, " + std::to_string(peer_timeout_ms) +
         " ms: link or host down?)";
  }
  return s;
}

}  // namespace

Status Conn::OnDataHeader(const FrameHeader& h, RecvDest* dest) { return engine->OnDataHeader(this, h, dest); }
Status Conn::OnDataDone(const FrameHeader& h, void* cookie) { return engine->OnDataDone(this, h, cookie); }
Status Conn::OnAbortFrame(const std::string& reason) { return engine->OnAbortFrame(this, reason); }
Status Conn::OnControlFrame(const FrameHeader& h) { return engine->OnControlFrame(this, h); }

Engine::Engine(const EngineOptions& opts, std::vector<PeerInfo> peers)
    : opts_(opts),
      rank_(opts.rank),
      size_(opts.size),
      early_bufs_(static_cast<size_t>(std::max<int64_t>(0, opts.early_cache_bytes))),
      peers_(static_cast<size_t>(opts.size)) {
  for (int p = 0; p < size_ && p < static_cast<int>(peers.size()); ++p) peers_[p].info = std::move(peers[p]);
}

Result<std::unique_ptr<Engine>> Engine::Start(const EngineOptions& opts, std::vector<PeerInfo> peers,
                                              std::vector<std::vector<UniqueFd>> sockets) {
  std::unique_ptr<Engine> e(new Engine(opts, std::move(peers)));
  // Blocking on purpose: io_uring answers a read on an O_NONBLOCK eventfd with -EAGAIN
  // at once instead of waiting for it, which would turn the engine into a busy loop.
  // (The epoll engine reads it only after epoll reported it readable.)
  CHORUS_RETURN_IF_ERROR(e->inbox_.Init());
  // The ring is created on the engine thread: it is the ring's only submitter.
  std::promise<Status> started;
  std::future<Status> ready = started.get_future();
  e->thread_ = std::thread(&Engine::Run, e.get(), &sockets, &started);
  Status st = ready.get();
  if (!st.ok()) {
    e->thread_.join();
    return st;
  }
  return e;
}

Engine::~Engine() {
  inbox_.RequestStop();
  Kick();
  if (thread_.joinable()) thread_.join();
}

void Engine::Run(std::vector<std::vector<UniqueFd>>* sockets, std::promise<Status>* started) {
  Status st = Init(sockets);
  started->set_value(st);
  if (!st.ok()) return;
  Loop();
  Teardown();
}

Status Engine::Init(std::vector<std::vector<UniqueFd>>* sockets) {
  int nconns = 0;
  for (auto& v : *sockets) nconns += static_cast<int>(v.size());
  nconns = std::max(nconns, opts_.max_conns);
  Result<std::unique_ptr<Poller>> p =
      opts_.use_uring ? MakeUringPoller(this, inbox_.wake_fd(), nconns) : MakeEpollPoller(this, inbox_.wake_fd());
  if (!p.ok())
    return p.status().WithContext("rank " + std::to_string(rank_) + ": TCP engine " +
                                  (opts_.use_uring ? "io_uring" : "epoll"));
  poller_ = std::move(p.value());
  engine_name_ = poller_->name();
  app_progress_ = poller_->any_thread() && opts_.app_progress;
  for (int p = 0; p < size_ && p < static_cast<int>(sockets->size()); ++p) {
    std::vector<UniqueFd>& fds = (*sockets)[p];
    for (size_t i = 0; i < fds.size(); ++i) {
      peers_[p].conns.push_back(std::make_unique<Conn>(this, p, static_cast<int>(i), std::move(fds[i])));
      CHORUS_RETURN_IF_ERROR(poller_->Add(peers_[p].conns.back().get()));
    }
  }
  return Status::Ok();
}

void Engine::Loop() {
  for (;;) {
    {
      std::lock_guard<std::timed_mutex> lock(drive_mu_);
      engine_driving_.store(true);
      const bool done = Step(Clock::now(), -1, /*engine_thread=*/true);
      engine_driving_.store(false);
      if (done) return;
    }
    if (app_progress_) Park();
  }
}

bool Engine::Step(Clock::time_point now, int max_wait_ms, bool engine_thread, BasicRequest* wanted) {
  if (finished_) return true;
  DrainCommands(now);
  FailBrokenConns();
  FinalizeFailedPeers();
  CheckTimeouts(now);
  CheckPeers(now);
  if (!aborting_ && stopping_) {
    if (active_ == 0) return finished_ = true;
    BeginAbort(AbortedError("transport destroyed with " + std::to_string(active_) + " requests pending"));
  }
  if (aborting_ && ProgressAbort()) return finished_ = true;
  if (max_wait_ms == kNoPoll) return false;
  const uint64_t moved_before = moved_;
  Status st;
  if (!app_progress_ && now - last_activity_ < std::chrono::microseconds(opts_.spin_us)) {
    // Busy a moment ago: the next request or byte is likely microseconds away, and
    // waking from a sleep costs tens of them. Poll, yielding the CPU between looks.
    st = poller_->Poll(0);
    if (!inbox_.HasWork()) sched_yield();
  } else {
    int timeout = NextTimeoutMs(now);
    if (max_wait_ms >= 0) timeout = timeout < 0 ? max_wait_ms : std::min(timeout, max_wait_ms);
    if (engine_thread && app_want_.load() > 0) timeout = 0;  // hand over at once
    if (wanted != nullptr && wanted->Test()) timeout = 0;    // the commands completed it
    // Dekker-style hand-shake with Post() and Interrupt(): either we see their flag, or
    // they see us asleep and write the eventfd.
    const bool sleep = timeout != 0 && inbox_.BeginSleep();
    st = poller_->Poll(sleep ? timeout : 0);
    if (sleep) inbox_.EndSleep();
  }
  if (!st.ok() && !aborting_) BeginAbort(st.WithContext("rank " + std::to_string(rank_) + " TCP engine"));
  if (moved_ != moved_before && !app_progress_) last_activity_ = now;  // a transfer under way: keep polling
  return false;
}

void Engine::Park() {
  std::unique_lock<std::mutex> lock(park_mu_);
  for (;;) {
    if (kicked_) {
      kicked_ = false;
      return;
    }
    const bool busy = app_want_.load() > 0 || app_driving_.load();
    const auto at = Clock::time_point(std::chrono::nanoseconds(hand_back_at_.load()));
    if (!busy && Clock::now() >= at) return;
    park_cv_.wait_until(lock, busy ? Clock::now() + kHandBack : at);
  }
}

void Engine::Kick() {
  std::lock_guard<std::mutex> lock(park_mu_);
  kicked_ = true;
  park_cv_.notify_one();
}

void Engine::LeaveDriving(Clock::time_point now) {
  app_driving_.store(false);
  hand_back_at_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>((now + kHandBack).time_since_epoch()).count());
  const bool finished = finished_;
  drive_mu_.unlock();
  if (finished) Kick();  // the engine thread tears down
}

void Engine::Teardown() {
  std::lock_guard<std::timed_mutex> lock(drive_mu_);
  for (Peer& p : peers_) {
    for (auto& c : p.conns) poller_->Remove(c.get());
  }
  poller_.reset();
  for (Peer& p : peers_) p.conns.clear();
  {
    std::lock_guard<std::mutex> lock(added_mu_);
    torn_down_ = true;
    added_.clear();  // sockets added after the last drain close too
  }
  inbox_.Exit(aborting_ ? abort_status_ : AbortedError("transport closed"));
}

// ---- Application threads ----

RequestPtr Engine::Post(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                        uint64_t fingerprint) {
  auto req = std::make_shared<BasicRequest>(kind, rank_, peer, tag, buf, bytes, fingerprint, opts_.spin_us,
                                            app_progress_ ? this : nullptr);
  inbox_.Post(req);
  // A send leaves now, from this thread, when nobody is driving (a receive waits for
  // the Wait() that drives).
  if (app_progress_ && kind == BasicRequest::Kind::kSend && !engine_driving_.load() && drive_mu_.try_lock()) {
    app_driving_.store(true);
    const auto now = Clock::now();
    Step(now, kNoPoll, /*engine_thread=*/false);  // epoll sends at once when the socket has room
    LeaveDriving(now);
  }
  return req;
}

void Engine::Progress() {
  if (!app_progress_ || engine_driving_.load() || app_driving_.load() || !drive_mu_.try_lock()) return;
  app_driving_.store(true);
  const auto now = Clock::now();
  Step(now, 0, /*engine_thread=*/false);
  LeaveDriving(now);
}

void Engine::Drive(BasicRequest& req, Deadline deadline) {
  // One clock read per round: in a VM each costs a noticeable part of a short call.
  auto now = Clock::now();
  auto spin_until = now + std::chrono::microseconds(opts_.spin_us);
  while (!req.Test() && now < deadline.at()) {
    if (!drive_mu_.try_lock()) {
      if (!engine_driving_.load()) {
        // Another application thread drives: it completes this request too.
        req.WaitUntil(std::min(deadline.at(), now + kOtherDriverLook));
        now = Clock::now();
        continue;
      }
      // The engine thread drives (perhaps asleep in its poll): ask it to step aside.
      // Never block on the lock for long: another thread may be driving while this
      // request completes, and this thread's caller may be what the others wait for.
      app_want_.fetch_add(1);
      inbox_.Interrupt();
      bool got = false;
      while (!(got = TryLockFor(drive_mu_, kLockLook)) && !req.Test() && Clock::now() < deadline.at()) {
      }
      app_want_.fetch_sub(1);
      now = Clock::now();
      if (!got) continue;
    }
    app_driving_.store(true);
    bool finished = false;
    uint64_t moved = moved_;
    while (!req.Test()) {
      if (now >= deadline.at()) break;
      // Poll without sleeping for spin_us after the last bytes moved (the answer to a
      // short message is a few microseconds away; a transfer under way moves more any
      // moment, and a sleeper woken for each piece costs its waker an interrupt), then
      // sleep in the poll itself.
      if (moved_ != moved) {
        moved = moved_;
        spin_until = now + std::chrono::microseconds(opts_.spin_us);
      }
      int wait_ms = 0;
      if (now >= spin_until) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() - now).count();
        wait_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 1, 100));
      }
      if (Step(now, wait_ms, /*engine_thread=*/false, &req)) {
        finished = true;
        break;
      }
      if (wait_ms == 0 && !req.Test()) sched_yield();
      now = Clock::now();
    }
    LeaveDriving(now);
    if (finished) break;  // every request has been completed, or will be by Exit()
  }
}

void Engine::Abort(const Status& reason) {
  inbox_.RequestAbort(reason);
  Kick();
  inbox_.WaitExit();
}

void Engine::ReleaseTags(uint64_t first, uint64_t last) { inbox_.Release(first, last); }

void Engine::AddPeer(int peer, std::vector<UniqueFd> sockets) {
  {
    std::lock_guard<std::mutex> lock(added_mu_);
    // An engine whose abort is over serves no socket: closing them tells the peer at
    // once, where held open they would leave it waiting until its deadline.
    if (torn_down_) return;
    added_.emplace_back(peer, std::move(sockets));
  }
  inbox_.Interrupt();
  Kick();
}

// ---- Engine thread: commands ----

void Engine::DrainCommands(Clock::time_point now) {
  Inbox::Batch& b = batch_;
  inbox_.Drain(&b);
  // After the drain: sockets added before a post drained now are in place for it.
  TakeAddedPeers();
  if (!b.posts.empty() && !app_progress_) last_activity_ = now;
  for (BasicRequestPtr& req : b.posts) {
    ++active_;
    Peer& peer = peers_[req->peer()];
    if (peer.pending++ == 0) peer.wait_since = now;  // silence counts from here
    deadlines_.Track(req, now);
    if (aborting_) {
      Finish(req, abort_status_);
    } else if (req->peer() != rank_ && peer.conns.empty() && peer.error.ok()) {
      // Lazy connections: the transport connects a peer before it posts to it.
      Finish(req, InternalError("rank " + std::to_string(rank_) + ": " + req->Describe() + " with " +
                                PeerDesc(req->peer()) + " posted before the peer was connected"));
    } else if (req->kind() == BasicRequest::Kind::kSend) {
      PostSend(req);
    } else {
      PostRecv(req);
    }
  }
  // Tags of finished collectives: every message with them has been matched, so their
  // sequence counters can go (the map would otherwise grow with every call).
  for (const auto& [first, last] : b.releases) {
    for (Peer& p : peers_) p.tags.Release(first, last);
  }
  if (b.abort && !aborting_) BeginAbort(b.abort_reason);
  if (b.stop) stopping_ = true;
}

void Engine::TakeAddedPeers() {
  std::vector<std::pair<int, std::vector<UniqueFd>>> added;
  {
    std::lock_guard<std::mutex> lock(added_mu_);
    if (added_.empty()) return;
    added.swap(added_);
  }
  for (auto& [p, fds] : added) {
    Peer& peer = peers_[p];
    if (!peer.conns.empty() || p == rank_) continue;  // cannot happen: the transport adds a peer once
    for (size_t i = 0; i < fds.size(); ++i) {
      peer.conns.push_back(std::make_unique<Conn>(this, p, static_cast<int>(i), std::move(fds[i])));
      Status st = poller_->Add(peer.conns.back().get());
      if (!st.ok() && !aborting_) BeginAbort(st.WithContext("rank " + std::to_string(rank_) + " TCP engine"));
    }
    // An aborting engine tells the newcomer why, as it told the others.
    if (aborting_ && peer.error.ok() && !peer.conns.empty()) {
      QueueAbortFrame(peer.conns[0].get());
      poller_->StartSend(peer.conns[0].get());
    }
  }
}

void Engine::Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp) {
  if (req->Complete(st, remote_fp)) {
    --active_;
    --peers_[req->peer()].pending;
    if (!app_progress_) last_activity_ = Clock::now();  // the io_uring engine's spin
  }
}

void Engine::PostSend(const BasicRequestPtr& req) {
  const int p = req->peer();
  if (!peers_[p].error.ok()) return Finish(req, peers_[p].error);
  if (p == rank_) return SelfSend(req);
  TagState& ts = peers_[p].tags[req->tag()];
  const uint64_t seq = ts.next_send_seq++;
  const bool ready = !ts.early_ready.empty() && ts.early_ready.erase(seq) > 0;
  if (!ready && (ByRendezvous(req->tag(), req->bytes()) || (peers_[p].paused && req->bytes() > 0))) {
    ts.awaiting_ready.emplace(seq, req);
    return SendControl(p, FrameType::kRts, req->tag(), seq, req->bytes());
  }
  StartData(req, seq);
}

bool Engine::ByRendezvous(uint64_t tag, uint64_t bytes) const {
  return Rendezvous(tag, bytes) || bytes >= opts_.rendezvous_all_from;
}

void Engine::StartData(const BasicRequestPtr& req, uint64_t seq) {
  const int p = req->peer();
  FrameHeader h;
  h.type = FrameType::kData;
  h.tag = req->tag();
  h.tag_seq = seq;
  h.total_len = req->bytes();
  h.fingerprint = req->fingerprint();
  std::vector<std::unique_ptr<Conn>>& conns = peers_[p].conns;
  const uint64_t n = conns.size();
  // Large messages go in n contiguous stripes, one per socket, so all sockets carry
  // the transfer; medium ones go whole, spread over the sockets round robin; small ones
  // on the first socket.
  const bool stripe = n > 1 && req->bytes() >= static_cast<uint64_t>(opts_.stripe_min_bytes) && req->bytes() >= n;
  const uint64_t nframes = stripe ? n : 1;
  req->pending_frames = static_cast<int>(nframes);
  const uint64_t first = stripe || req->bytes() < kOneSocketBelow ? 0 : (peers_[p].rr++ % n);
  for (uint64_t i = 0; i < nframes; ++i) {
    h.offset = req->bytes() * i / nframes;
    h.len = req->bytes() * (i + 1) / nframes - h.offset;
    Conn* c = conns[(first + i) % n].get();
    c->tx.Push(h, req->buf() + h.offset, req);
    poller_->StartSend(c);
  }
}

void Engine::SendControl(int peer, FrameType type, uint64_t tag, uint64_t seq, uint64_t total_len) {
  FrameHeader h;
  h.type = type;
  h.tag = tag;
  h.tag_seq = seq;
  h.total_len = total_len;
  Conn* c = peers_[peer].conns[0].get();
  c->tx.Push(h, nullptr, nullptr);
  poller_->StartSend(c);
}

void Engine::SendReady(int peer, uint64_t tag, uint64_t seq, InMsg& m, bool again) {
  if ((m.ready_sent && !again) || aborting_ || peer == rank_ || !peers_[peer].error.ok()) return;  // self: copied
  m.ready_sent = true;
  SendControl(peer, FrameType::kReady, tag, seq, 0);
}

Status Engine::OnControlFrame(Conn* c, const FrameHeader& h) {
  Peer& peer = peers_[c->peer];
  if (h.type == FrameType::kPing) {
    if (!aborting_ && peer.error.ok()) SendControl(c->peer, FrameType::kPong, 0, 0, 0);
    return Status::Ok();
  }
  if (h.type == FrameType::kPong) return Status::Ok();  // its bytes said it is alive (OnRecvResult)
  if (h.type == FrameType::kPause || h.type == FrameType::kResume) {
    peer.paused = h.type == FrameType::kPause;
    if (peer.paused) {
      for (auto& conn : peer.conns) {
        if (conn->send_inflight) {
          conn->pause_pending = true;  // done in OnSendResult
        } else {
          PullBackData(conn.get());
        }
      }
    }
    return Status::Ok();
  }
  TagState& ts = peer.tags[h.tag];
  if (h.type == FrameType::kReady) {
    auto it = ts.awaiting_ready.find(h.tag_seq);
    if (it != ts.awaiting_ready.end()) {
      BasicRequestPtr req = std::move(it->second);
      ts.awaiting_ready.erase(it);
      if (!aborting_ && peer.error.ok()) StartData(req, h.tag_seq);
    } else if (h.tag_seq >= ts.next_send_seq) {
      ts.early_ready.insert(h.tag_seq);  // for a send not posted yet
    }                                    // else: the READY of a message that went at once (smaller than its Recv said)
    return Status::Ok();
  }
  // RTS: the sender waits for our Recv. A READY sent ahead may have reached it before
  // its send was posted as one that waits (taken back after a PAUSE): answer every RTS.
  InMsg& m = ts.msgs[h.tag_seq];
  m.rts_seen = true;
  if (m.recv || m.discard) SendReady(c->peer, h.tag, h.tag_seq, m, /*again=*/true);
  return Status::Ok();
}

void Engine::PullBackData(Conn* c) {
  if (c->shut || aborting_) return;
  std::vector<OutFrame> back = c->tx.TakeUnstarted([](const OutFrame& f) {
    return f.h.type == FrameType::kData && f.request && f.h.len > 0 && f.h.len == f.h.total_len;
  });
  for (OutFrame& f : back) {
    peers_[c->peer].tags[f.h.tag].awaiting_ready.emplace(f.h.tag_seq, std::move(f.request));
    SendControl(c->peer, FrameType::kRts, f.h.tag, f.h.tag_seq, f.h.total_len);
  }
}

void Engine::SelfSend(const BasicRequestPtr& req) {
  TagState& ts = peers_[rank_].tags[req->tag()];
  const uint64_t seq = ts.next_send_seq++;
  InMsg& m = ts.msgs[seq];
  m.header_seen = true;
  m.total_len = req->bytes();
  m.fingerprint = req->fingerprint();
  m.frames_seen = 1;
  m.bytes_done = req->bytes();
  if (m.recv) {
    Status st = CheckMatch(rank_, rank_, req->tag(), m.total_len, m.fingerprint, *m.recv);
    if (st.ok() && req->bytes() > 0) std::memcpy(m.recv->buf(), req->buf(), req->bytes());
    Finish(m.recv, st, st.ok() ? 0 : m.fingerprint);
    ts.msgs.erase(seq);
  } else if (req->bytes() > 0) {
    // Not received yet: keep a copy so the send completes at once (as MPI's eager path).
    TakeEarly(rank_, m, req->bytes());
    std::memcpy(m.ubuf.data(), req->buf(), req->bytes());
  }
  Finish(req, Status::Ok());
}

void Engine::TakeEarly(int peer, InMsg& m, uint64_t bytes) {
  early_messages_.fetch_add(1, std::memory_order_relaxed);
  early_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  m.ubuf = early_bufs_.Get(bytes);
  if (peer == rank_) return;  // our own sends: copied, never paused
  Peer& p = peers_[peer];
  m.held = bytes;
  if (p.held.Add(bytes, opts_.pause_above) && p.error.ok() && !aborting_) {
    SendControl(peer, FrameType::kPause, 0, 0, 0);
  }
}

void Engine::ReleaseHeld(int peer, InMsg& m) {
  if (m.held == 0) return;
  Peer& p = peers_[peer];
  const uint64_t bytes = m.held;
  m.held = 0;
  if (p.held.Remove(bytes, opts_.resume_below) && p.error.ok() && !aborting_) {
    SendControl(peer, FrameType::kResume, 0, 0, 0);
  }
}

void Engine::PostRecv(const BasicRequestPtr& req) {
  const int p = req->peer();
  if (!peers_[p].error.ok()) return Finish(req, peers_[p].error);
  auto [ts, seq, m, failed] = peers_[p].tags.PostRecv(rank_, p, req, Finisher());
  if (failed) return MaybeComplete(p, ts, seq);
  if (!m.header_seen) {
    // Frames will be received straight into the buffer; a rendezvous sender waits for
    // this READY (sent ahead, where the Recv is large enough that it may be one).
    if (m.rts_seen || ByRendezvous(req->tag(), req->bytes())) SendReady(p, req->tag(), seq, m);
    return;
  }
  Status st = CheckMatch(rank_, p, req->tag(), m.total_len, m.fingerprint, *req);
  if (!st.ok()) {
    Finish(req, st, m.fingerprint);
    m.recv.reset();
    m.discard = true;
  }
  MaybeComplete(p, ts, seq);
}

void Engine::MaybeComplete(int peer, TagState& ts, uint64_t seq) {
  auto it = ts.msgs.find(seq);
  if (it == ts.msgs.end()) return;
  InMsg& m = it->second;
  const bool complete = m.header_seen && m.bytes_done == m.total_len && m.frames_seen > 0;
  if (!complete) return;
  if (m.discard) {
    ReleaseHeld(peer, m);
    ts.msgs.erase(it);
  } else if (m.recv) {
    if (m.ubuf.data() != nullptr && m.total_len > 0) std::memcpy(m.recv->buf(), m.ubuf.data(), m.total_len);
    Finish(m.recv, Status::Ok());
    ReleaseHeld(peer, m);
    ts.msgs.erase(it);
  }
  // else: an unexpected message, kept until its Recv is posted.
}

void Engine::FrameResolved(const BasicRequestPtr& req, const Status& st) {
  if (!st.ok() && req->first_error.ok()) req->first_error = st;
  if (--req->pending_frames <= 0) Finish(req, req->first_error);
}

// ---- Engine thread: frames from the state machines ----

Status Engine::OnDataHeader(Conn* c, const FrameHeader& h, RecvDest* dest) {
  Peer& peer = peers_[c->peer];
  TagState& ts = peer.tags[h.tag];
  InMsg& m = ts.msgs[h.tag_seq];
  if (!m.header_seen) {
    m.header_seen = true;
    m.total_len = h.total_len;
    m.fingerprint = h.fingerprint;
    // A discarded message is dropped once its frames are read (MaybeComplete).
    peer.tags.Arrived(rank_, c->peer, h.tag, h.fingerprint, Finisher(), [](uint64_t, const InMsg&) { return false; });
    if (m.recv) {
      Status st = CheckMatch(rank_, c->peer, h.tag, h.total_len, h.fingerprint, *m.recv);
      if (!st.ok()) {
        Finish(m.recv, st, h.fingerprint);
        m.recv.reset();
        m.discard = true;
      }
    }
  } else if (m.total_len != h.total_len) {
    return ProtocolError("rank " + std::to_string(rank_) + ": " + PeerDesc(c->peer) + " sent stripes of tag " +
                         std::to_string(h.tag) + " message " + std::to_string(h.tag_seq) +
                         " with different total sizes (" + std::to_string(m.total_len) + " and " +
                         std::to_string(h.total_len) + ")");
  }
  if (m.discard || h.len == 0) {
    dest->ptr = nullptr;
  } else if (m.recv && m.ubuf.data() == nullptr) {
    dest->ptr = m.recv->buf() + h.offset;  // zero copy into the posted buffer
  } else {
    if (m.ubuf.data() == nullptr) TakeEarly(c->peer, m, m.total_len);
    dest->ptr = m.ubuf.data() + h.offset;
  }
  return Status::Ok();
}

Status Engine::OnDataDone(Conn* c, const FrameHeader& h, void*) {
  TagState& ts = peers_[c->peer].tags[h.tag];
  auto it = ts.msgs.find(h.tag_seq);
  if (it == ts.msgs.end()) return Status::Ok();
  it->second.bytes_done += h.len;
  it->second.frames_seen += 1;
  MaybeComplete(c->peer, ts, h.tag_seq);
  return Status::Ok();
}

Status Engine::OnAbortFrame(Conn* c, const std::string& reason) {
  const Peer& p = peers_[c->peer];
  Status st = PeerFailed("rank " + std::to_string(c->peer) + " (host " + p.info.host + ") aborted: " + reason);
  FailPeer(c->peer, st);
  // The peer's communicator is dead, so every call on this one is doomed as well:
  // stop now and tell the other peers, whatever they were waiting for.
  if (!aborting_) BeginAbort(st);
  return Status::Ok();
}

// ---- Engine thread: I/O results ----

void Engine::OnRecvResult(Conn* c, int64_t res) {
  if (c->shut) return;
  if (res > 0) {
    ++moved_;
    peers_[c->peer].heard = true;
    Status st = c->rx.OnReceived(static_cast<size_t>(res));
    if (!st.ok())
      FailPeer(c->peer, st.WithContext("rank " + std::to_string(rank_) + ": stream from " + PeerDesc(c->peer)));
    return;
  }
  if (res == -EINTR || res == -EAGAIN) return;
  ConnLost(c,
           PeerFailed("rank " + std::to_string(rank_) + ": connection to " + PeerDesc(c->peer) +
                      " lost: " + ErrnoText(res, opts_.peer_timeout_ms)),
           /*recv_ended=*/true);
}

void Engine::OnSendResult(Conn* c, int64_t res) {
  if (res >= 0) {
    moved_ += res > 0 ? 1 : 0;
    sent_scratch_.clear();
    c->tx.OnSent(static_cast<size_t>(res), &sent_scratch_);
    for (const BasicRequestPtr& r : sent_scratch_) FrameResolved(r, Status::Ok());
    sent_scratch_.clear();
    if (c->abort_pending && !c->shut) {
      // Now no send is in flight: replace what has not started with the ABORT frame.
      QueueAbortFrame(c);
      c->abort_pending = false;
    }
    if (c->pause_pending) {
      c->pause_pending = false;
      if (peers_[c->peer].paused) PullBackData(c);
    }
    return;
  }
  if (c->shut || res == -EINTR || res == -EAGAIN || !c->lost.ok()) return;
  ConnLost(c,
           PeerFailed("rank " + std::to_string(rank_) + ": connection to " + PeerDesc(c->peer) +
                      " lost while sending: " + ErrnoText(res, opts_.peer_timeout_ms)),
           /*recv_ended=*/false);  // its receive side may still hold the ABORT frame
}

void Engine::ConnLost(Conn* c, const Status& why, bool recv_ended) {
  if (c->lost.ok()) {
    c->lost = why;
    c->lost_deadline = Clock::now() + kReadAfterLoss;
    broken_.push_back(c);
  }
  if (recv_ended && !c->recv_ended) {
    c->recv_ended = true;
    c->shut = true;
    ::shutdown(c->fd.get(), SHUT_RDWR);
    poller_->Cancel(c);
    poller_->Remove(c);  // epoll would report the closed socket again and again
  }
}

void Engine::FailBrokenConns() {
  const auto now = Clock::now();
  for (size_t i = 0; i < broken_.size();) {
    Conn* c = broken_[i];
    bool all_ended = true;
    for (const auto& other : peers_[c->peer].conns) all_ended = all_ended && other->recv_ended;
    if (peers_[c->peer].error.ok() && now < c->lost_deadline && !all_ended) {
      ++i;
      continue;
    }
    FailPeer(c->peer, c->lost);  // does nothing when the peer failed meanwhile (its ABORT)
    broken_.erase(broken_.begin() + static_cast<long>(i));
  }
}

// ---- Failures, aborts, timeouts ----

void Engine::FailPeer(int peer, const Status& st) {
  Peer& p = peers_[peer];
  if (!p.error.ok()) return;
  if (peer == rank_) return;
  p.error = st;
  bool pending = false;
  for (auto& c : p.conns) pending = pending || !c->tx.empty();
  for (auto& [tag, ts] : p.tags) {
    for (auto& [seq, m] : ts.msgs) pending = pending || m.recv != nullptr;
    pending = pending || !ts.awaiting_ready.empty();
  }
  // Even with nothing outstanding the communicator has lost a member: health() says
  // so (the shutdown barrier is skipped) and requests posted to it later fail with st.
  health_.Set(st);
  if (pending || aborting_) {
    CHORUS_WARN(st.message());
    // Requests to other peers belong to the same calls: fail them too (and tell those
    // peers) rather than leave them waiting for data that depends on the lost rank.
    if (!aborting_) BeginAbort(st);
  } else {
    CHORUS_INFO(st.message());
  }
  for (auto& c : p.conns) {
    c->shut = true;
    ::shutdown(c->fd.get(), SHUT_RDWR);
    poller_->Cancel(c.get());
  }
  failing_.push_back(peer);
}

void Engine::FinalizeFailedPeers() {
  // A failed peer's requests complete only once no I/O on its sockets is in flight:
  // the kernel may still be writing into (or reading from) their buffers until then.
  for (size_t i = 0; i < failing_.size();) {
    Peer& p = peers_[failing_[i]];
    bool busy = false;
    for (auto& c : p.conns) busy = busy || c->recv_inflight || c->send_inflight;
    if (busy) {
      ++i;
      continue;
    }
    for (auto& c : p.conns) {
      for (const BasicRequestPtr& r : c->tx.Drop(true)) FrameResolved(r, p.error);
      poller_->Remove(c.get());
    }
    p.tags.FailAll(p.error, Finisher());
    for (auto& [tag, ts] : p.tags) {
      for (auto& [seq, req] : ts.awaiting_ready) Finish(req, p.error);
      ts.awaiting_ready.clear();
    }
    failing_.erase(failing_.begin() + static_cast<long>(i));
  }
}

void Engine::BeginAbort(const Status& reason) {
  aborting_ = true;
  abort_status_ = reason;
  health_.Set(reason);
  inbox_.Close(reason);  // from now on posts fail at once with the reason
  linger_deadline_ = Clock::now() + kAbortLinger;
  for (Peer& p : peers_) {
    if (!p.error.ok()) continue;
    for (auto& c : p.conns) {
      if (c->send_inflight) {
        c->abort_pending = true;  // queued when the send in flight completes
        continue;
      }
      QueueAbortFrame(c.get());
      poller_->StartSend(c.get());
      break;  // one ABORT per peer is enough
    }
  }
}

void Engine::QueueAbortFrame(Conn* c) {
  // Frames not yet started are dropped (their requests fail with the abort); a frame
  // partly on the wire is finished first so that the ABORT lands on a frame boundary.
  for (const BasicRequestPtr& r : c->tx.Drop(false)) FrameResolved(r, abort_status_);
  FrameHeader h;
  h.type = FrameType::kAbort;
  std::string text = abort_status_.message().substr(0, kMaxReasonLen);
  h.len = h.total_len = text.size();
  c->tx.PushOwned(h, std::move(text));
}

bool Engine::ProgressAbort() {
  // 1. Give the ABORT frames a bounded time to leave.
  if (Clock::now() < linger_deadline_) {
    bool sending = false;
    for (Peer& p : peers_) {
      if (!p.error.ok()) continue;
      for (auto& c : p.conns) sending = sending || c->abort_pending || (!c->tx.empty() && !c->shut);
    }
    if (sending) return false;
  }
  // 2. Close every socket and wait for operations in flight to come back.
  bool busy = false;
  for (Peer& p : peers_) {
    for (auto& c : p.conns) {
      if (!c->shut) {
        c->shut = true;
        ::shutdown(c->fd.get(), SHUT_RDWR);
        poller_->Cancel(c.get());
      }
      busy = busy || c->recv_inflight || c->send_inflight;
    }
  }
  if (busy) return false;
  // 3. Fail everything still posted.
  for (Peer& p : peers_) {
    const Status& st = p.error.ok() ? abort_status_ : p.error;
    for (auto& c : p.conns) {
      for (const BasicRequestPtr& r : c->tx.Drop(true)) FrameResolved(r, st);
    }
    p.tags.FailAll(st, Finisher());
    for (auto& [tag, ts] : p.tags) {
      for (auto& [seq, req] : ts.awaiting_ready) Finish(req, st);
      ts.awaiting_ready.clear();
    }
  }
  for (const BasicRequestPtr& r : deadlines_.TakeAll()) Finish(r, abort_status_);
  return true;
}

void Engine::CheckTimeouts(Clock::time_point now) {
  if (aborting_) return;
  BasicRequestPtr r = deadlines_.Expired(now);
  if (!r) return;
  // A request that outlived its deadline may still be written by the kernel: the only
  // safe way to give its buffer back is to stop the whole transport.
  BeginAbort(TimeoutError("rank " + std::to_string(rank_) + ": " + r->Describe() + " with " + PeerDesc(r->peer()) +
                          " did not finish within " + std::to_string(opts_.timeout_ms) + " ms"));
}

void Engine::CheckPeers(Clock::time_point now) {
  if (now < next_peer_check_ || aborting_) return;
  const auto timeout = std::chrono::milliseconds(opts_.peer_timeout_ms);
  const auto ping_after = timeout / kPingAfterParts;
  next_peer_check_ = now + std::max<Clock::duration>(timeout / kChecksPerTimeout, std::chrono::milliseconds(1));
  // Checks are due every tick while requests wait: a longer gap means this process did
  // not run (stopped, starved), and what the peers sent meanwhile is still unread.
  if (now - last_peer_check_ > ping_after) silence_from_ = now;
  last_peer_check_ = now;
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    // Heard since the last check: alive at least then, which this rounds up to now.
    if (peer.heard) {
      peer.heard = false;
      peer.last_heard = now;
    }
    if (p == rank_ || peer.pending == 0 || !peer.error.ok()) continue;
    const auto silent = now - std::max({peer.last_heard, peer.wait_since, silence_from_});
    if (silent >= timeout) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
      FailPeer(p, PeerFailed("rank " + std::to_string(rank_) + ": " + PeerDesc(p) + " sent nothing for " +
                             std::to_string(ms) + " ms while requests waited on it, not even the answer to a PING " +
                             "(stopped, hung, or cut off?); CHORUS_PEER_TIMEOUT (" +
                             std::to_string(opts_.peer_timeout_ms) + " ms) sets how long a peer may be silent"));
      continue;
    }
    Conn* first = peer.conns.empty() ? nullptr : peer.conns[0].get();
    if (silent >= ping_after && now - peer.last_ping >= ping_after && first != nullptr && !first->shut &&
        first->lost.ok()) {
      peer.last_ping = now;
      SendControl(p, FrameType::kPing, 0, 0, 0);
    }
  }
}

int Engine::NextTimeoutMs(Clock::time_point now) {
  int ms = (aborting_ || !failing_.empty() || !broken_.empty()) ? 10 : -1;
  if (active_ > 0 && !aborting_) {  // CheckPeers is due
    const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_peer_check_ - now).count() + 1;
    const int check = static_cast<int>(std::clamp<int64_t>(until, 0, INT32_MAX));
    ms = ms < 0 ? check : std::min(ms, check);
  }
  const int t = deadlines_.NextTimeoutMs();
  return ms < 0 ? t : t < 0 ? ms : std::min(ms, t);
}

std::string Engine::PeerDesc(int peer) const {
  const PeerInfo& info = peers_[peer].info;
  std::string s = "rank " + std::to_string(peer);
  if (!info.host.empty() || !info.address.empty()) s += " (host " + info.host + ", " + info.address + ")";
  return s;
}

}  // namespace chorus::transport::tcp
