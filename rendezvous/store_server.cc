#include "rendezvous/store_server.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/deadline.h"
#include "common/log.h"
#include "rendezvous/socket_io.h"
#include "rendezvous/store_protocol.h"

namespace chorus::rendezvous {
namespace {

constexpr size_t kReadChunk = 256 << 10;
// Per wake-up, per client: bounded so that one busy client cannot starve the others.
constexpr size_t kReadBudget = 4 << 20;
// Stop reading from a client that does not read its replies.
constexpr size_t kMaxOutPending = 4 << 20;
// Buffer at most one maximal frame (plus a read) per client.
constexpr size_t kMaxInBuffered = kMaxStoreFrameBytes + kStoreFrameHeaderBytes + kReadChunk;
constexpr int64_t kMaxWaitMs = 7LL * 24 * 3600 * 1000;
constexpr int kAcceptPauseMs = 100;
// A client must authenticate within this: a stranger that connects and stays silent
// holds a descriptor no longer.
constexpr int64_t kAuthMs = 10 * 1000;

// "'a', 'b' and 3 more": key lists in errors stay readable for big all-gathers.
std::string QuoteKeys(const std::vector<std::string>& keys) {
  std::string s;
  const size_t shown = std::min<size_t>(keys.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > shown) s += " and " + std::to_string(keys.size() - shown) + " more";
  return s;
}

std::string PeerName(int fd) {
  SocketAddress a;
  a.len = sizeof(a.storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return "?";
  uint16_t port = a.family() == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port)
                                        : ntohs(reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port);
  return JoinHostPort(NumericHost(a), port);
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(UniqueFd listen, UniqueFd epoll, UniqueFd stop, JobSecret secret)
      : listen_(std::move(listen)), epoll_(std::move(epoll)), stop_(std::move(stop)), secret_(std::move(secret)) {}

  void Run();
  void Stop() {
    stop_requested_.store(true);
    Wake();
  }
  void CloseListener() {
    close_listener_.store(true);
    Wake();
  }

 private:
  // A GET/WAIT/MULTI_GET waiting for keys.
  struct Parked {
    StoreRequest request;
    std::unordered_set<std::string> missing;
    Clock::time_point deadline;
    int64_t timeout_ms = 0;
  };
  struct Conn {
    UniqueFd fd;
    std::string peer;
    std::string in;
    size_t in_off = 0;
    std::string out;
    size_t out_off = 0;
    bool eof = false;      // the client closed its side
    bool closing = false;  // close once `out` is flushed
    bool dead = false;     // to be closed at the end of this iteration
    bool authed = false;   // its AUTH_PROOF was accepted: requests may follow
    Nonce server_nonce{};
    Clock::time_point auth_deadline;
    std::optional<Parked> parked;
    uint32_t interest = 0;
    size_t in_pending() const { return in.size() - in_off; }
    size_t out_pending() const { return out.size() - out_off; }
    // Before authentication nothing but the one AUTH_PROOF frame is read.
    size_t in_limit() const { return authed ? kMaxInBuffered : kAuthProofFrameBytes; }
  };

  void Accept();
  void OnReadable(Conn& c);
  void Flush(Conn& c);
  void Process(Conn& c);
  bool Authenticate(Conn& c);
  void Handle(Conn& c, StoreRequest req);
  void Reply(Conn& c, StoreOp op, const StoreReply& reply);
  void Fail(Conn& c, uint8_t opcode, const Status& why);
  void Answer(Conn& c, const StoreRequest& req);
  void KeyAppeared(const std::string& key);
  void Unpark(Conn& c);
  void ExpireParked();
  void ExpireUnauthenticated();
  int NextTimeoutMs();
  void UpdateInterest(Conn& c);
  void Kill(Conn& c);
  void Reap();
  Conn* Find(int fd) {
    auto it = conns_.find(fd);
    return it == conns_.end() || it->second->dead ? nullptr : it->second.get();
  }

  void Wake() {
    uint64_t one = 1;
    // An eventfd write only fails when the counter would overflow: not with one writer.
    (void)!write(stop_.get(), &one, sizeof(one));
  }

  UniqueFd listen_, epoll_, stop_;
  std::atomic<bool> stop_requested_{false}, close_listener_{false};
  const JobSecret secret_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;  // missing key -> parked fds
  size_t parked_count_ = 0;
  size_t unauthenticated_ = 0;  // connections still to prove themselves
  std::vector<int> resume_;     // connections whose buffered input can be processed again
  std::vector<int> dead_;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_at_;
};

void StoreServer::Loop::Run() {
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epoll_.get(), events, 64, NextTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      CHORUS_WARN("store server: epoll_wait failed: " << IoError("epoll_wait", errno).message());
      usleep(10 * 1000);  // do not spin on a persistent failure
      continue;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == stop_.get()) {
        if (stop_requested_.load()) return;
        uint64_t count = 0;
        (void)!read(stop_.get(), &count, sizeof(count));
        if (close_listener_.load() && listen_.valid()) {
          (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
          listen_.reset();
          accept_paused_ = false;
        }
        continue;
      }
      if (listen_.valid() && fd == listen_.get()) {
        Accept();
        continue;
      }
      Conn* c = Find(fd);
      if (c == nullptr) continue;
      if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) OnReadable(*c);
      if (!c->dead && (events[i].events & EPOLLOUT)) Flush(*c);
    }
    ExpireParked();
    ExpireUnauthenticated();
    while (!resume_.empty()) {
      int fd = resume_.back();
      resume_.pop_back();
      if (Conn* c = Find(fd)) Process(*c);
    }
    Reap();
    if (accept_paused_ && listen_.valid() && Clock::now() >= accept_resume_at_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_.get();
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev) == 0) accept_paused_ = false;
    }
  }
}

int StoreServer::Loop::NextTimeoutMs() {
  int64_t best = -1;
  const auto now = Clock::now();
  if (accept_paused_) best = kAcceptPauseMs;
  if (parked_count_ == 0 && unauthenticated_ == 0) return static_cast<int>(best);
  auto consider = [&](Clock::time_point deadline) {
    // Round up so that we wake at or after the deadline, not just before it.
    int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    ms = std::max<int64_t>(ms, 0);
    if (best < 0 || ms < best) best = ms;
  };
  for (auto& [fd, c] : conns_) {
    if (c->parked) consider(c->parked->deadline);
    if (!c->authed && !c->dead) consider(c->auth_deadline);
  }
  return static_cast<int>(std::min<int64_t>(best, INT_MAX));
}

void StoreServer::Loop::Accept() {
  for (;;) {
    int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the pending connection stays queued, so stop
      // polling the listener for a moment instead of spinning on it.
      CHORUS_WARN("store server: accept failed (" << IoError("accept", errno).message() << "); pausing accepts for "
                                                  << kAcceptPauseMs << " ms");
      epoll_event ev{};
      ev.data.fd = listen_.get();
      (void)epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev);
      accept_paused_ = true;
      accept_resume_at_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
      return;
    }
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    c->peer = PeerName(fd);
    SetNoDelay(fd);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      CHORUS_WARN("store server: cannot watch connection from " << c->peer << ": "
                                                                << IoError("epoll_ctl", errno).message());
      continue;  // `c` closes the socket
    }
    c->interest = ev.events;
    Result<Nonce> nonce = NewNonce();
    if (!nonce.ok()) {
      CHORUS_WARN("store server: dropping client " << c->peer << ": " << nonce.status().message());
      continue;
    }
    c->server_nonce = nonce.value();
    c->auth_deadline = Clock::now() + std::chrono::milliseconds(kAuthMs);
    ++unauthenticated_;
    CHORUS_TRACE("store server: client connected from " << c->peer);
    Conn& conn = *c;
    conns_[fd] = std::move(c);
    conn.out = EncodeAuthChallenge({!secret_.empty(), conn.server_nonce});
    Flush(conn);
  }
}

void StoreServer::Loop::OnReadable(Conn& c) {
  char buf[kReadChunk];
  size_t budget = kReadBudget;
  while (!c.eof && budget > 0 && c.in_pending() < c.in_limit()) {
    ssize_t n = recv(c.fd.get(), buf, std::min(sizeof(buf), c.in_limit() - c.in_pending()), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      c.eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    CHORUS_TRACE("store server: client " << c.peer << " failed: " << IoError("recv", errno).message());
    Kill(c);
    return;
  }
  Process(c);
}

bool StoreServer::Loop::Authenticate(Conn& c) {
  std::string_view rest(c.in.data() + c.in_off, c.in_pending());
  FrameParse fp = ParseFrame(rest, kAuthProofFrameBytes - 4);
  if (fp.state == FrameState::kIncomplete) {
    if (c.eof) {
      CHORUS_WARN("store server: client " << c.peer << " closed the connection before authenticating");
      Kill(c);
    }
    return false;
  }
  if (fp.state == FrameState::kInvalid) {
    Fail(c, fp.opcode, fp.error);
    return false;
  }
  c.in_off += fp.frame.total_bytes;
  Result<AuthProof> proof = DecodeAuthProof(fp.frame.opcode, fp.frame.payload);
  if (!proof.ok()) {
    Fail(c, fp.frame.opcode, proof.status());
    return false;
  }
  const AuthProof& p = proof.value();
  if (!secret_.empty() && !p.has_secret) {
    Fail(c, kAuthProofOpcode,
         MismatchError("the store requires a job secret; this client has none (set CHORUS_SECRET or CHORUS_SECRET_FILE "
                       "as for the rank that hosts the store)"));
    return false;
  }
  if (secret_.empty() && p.has_secret) {
    Fail(c, kAuthProofOpcode,
         MismatchError("the client has a job secret but the store does not (set CHORUS_SECRET or "
                       "CHORUS_SECRET_FILE on every rank, or on none)"));
    return false;
  }
  Sha256Digest answer{};
  if (!secret_.empty()) {
    const Sha256Digest want = StoreClientMac(secret_, c.server_nonce, p.client_nonce);
    if (!ConstantTimeEqual(p.mac.data(), want.data(), want.size())) {
      Fail(c, kAuthProofOpcode,
           MismatchError("the client did not prove the job secret (its CHORUS_SECRET differs: another "
                         "job's process, or a stranger)"));
      return false;
    }
    answer = StoreServerMac(secret_, c.server_nonce, p.client_nonce);
  }
  c.authed = true;
  --unauthenticated_;
  CHORUS_TRACE("store server: client " << c.peer << " authenticated");
  c.out += EncodeAuthAccepted(answer);
  Flush(c);
  return !c.dead;
}

void StoreServer::Loop::Process(Conn& c) {
  if (!c.dead && !c.closing && !c.authed && !Authenticate(c)) {
    if (!c.dead) UpdateInterest(c);
    return;
  }
  while (!c.dead && !c.closing && !c.parked && c.out_pending() < kMaxOutPending) {
    std::string_view rest(c.in.data() + c.in_off, c.in_pending());
    FrameParse fp = ParseFrame(rest);
    if (fp.state == FrameState::kIncomplete) {
      if (c.eof) {
        if (rest.empty()) {
          c.closing = true;
        } else {
          Fail(c, fp.opcode,
               ProtocolError("connection closed in the middle of a frame (" + std::to_string(rest.size()) +
                             " bytes of it arrived)"));
        }
      }
      break;
    }
    if (fp.state == FrameState::kInvalid) {
      Fail(c, fp.opcode, fp.error);
      break;
    }
    Result<StoreRequest> req = DecodeRequest(fp.frame.opcode, fp.frame.payload);
    c.in_off += fp.frame.total_bytes;
    if (!req.ok()) {
      Fail(c, fp.frame.opcode, req.status());
      break;
    }
    Handle(c, std::move(req.value()));
  }
  if (c.in_off == c.in.size()) {
    c.in.clear();
    c.in_off = 0;
  } else if (c.in_off > (1 << 20)) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  // A client that went away while its request is parked cannot get the answer.
  if (c.eof && c.parked) Kill(c);
  if (c.closing && c.out_pending() == 0) Kill(c);
  if (!c.dead) UpdateInterest(c);
}

void StoreServer::Loop::Fail(Conn& c, uint8_t opcode, const Status& why) {
  CHORUS_WARN("store server: dropping client " << c.peer << ": " << why.message());
  c.out += EncodeErrorReply(opcode, why.message());
  c.closing = true;
  Flush(c);
}

void StoreServer::Loop::Handle(Conn& c, StoreRequest req) {
  StoreReply reply;
  switch (req.op) {
    case StoreOp::kSet: {
      const std::string& key = req.keys[0];
      kv_[key] = std::move(req.value);
      Reply(c, req.op, reply);
      KeyAppeared(key);
      return;
    }
    case StoreOp::kGet:
    case StoreOp::kWait:
    case StoreOp::kMultiGet: {
      Parked p;
      for (const auto& k : req.keys) {
        if (kv_.find(k) == kv_.end()) p.missing.insert(k);
      }
      if (p.missing.empty()) {
        Answer(c, req);
        return;
      }
      p.timeout_ms = std::clamp<int64_t>(req.number, 0, kMaxWaitMs);
      p.deadline = Clock::now() + std::chrono::milliseconds(p.timeout_ms);
      for (const auto& k : p.missing) waiters_[k].insert(c.fd.get());
      p.request = std::move(req);
      c.parked = std::move(p);
      ++parked_count_;
      if (c.parked->timeout_ms == 0) ExpireParked();
      return;
    }
    case StoreOp::kAdd: {
      const std::string& key = req.keys[0];
      auto it = kv_.find(key);
      const bool existed = it != kv_.end();
      int64_t current = 0;
      if (existed) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(it->second.c_str(), &end, 10);
        if (errno != 0 || it->second.empty() || *end != '\0') {
          reply.code = ReplyCode::kError;
          reply.message = "ADD on key '" + key + "', which holds '" + it->second.substr(0, 64) + "', not an integer";
          Reply(c, req.op, reply);
          return;
        }
        current = v;
      }
      int64_t next = 0;
      if (__builtin_add_overflow(current, req.number, &next)) {
        reply.code = ReplyCode::kError;
        reply.message = "ADD of " + std::to_string(req.number) + " to key '" + key + "' (" + std::to_string(current) +
                        ") overflows int64";
        Reply(c, req.op, reply);
        return;
      }
      kv_[key] = std::to_string(next);
      reply.number = next;
      Reply(c, req.op, reply);
      if (!existed) KeyAppeared(key);
      return;
    }
    case StoreOp::kCompareSet: {
      // Like torch's compare_set: an absent key counts as "", so expected "" creates it.
      const std::string& key = req.keys[0];
      auto it = kv_.find(key);
      const bool present = it != kv_.end();
      if ((present && it->second == req.expected) || (!present && req.expected.empty())) {
        kv_[key] = req.value;
        reply.values = {req.value};
        Reply(c, req.op, reply);
        if (!present) KeyAppeared(key);
        return;
      }
      reply.values = {present ? it->second : std::string()};
      Reply(c, req.op, reply);
      return;
    }
    case StoreOp::kDelete:
      reply.number = kv_.erase(req.keys[0]) > 0 ? 1 : 0;
      Reply(c, req.op, reply);
      return;
    case StoreOp::kCheck:
      reply.number = 1;
      for (const auto& k : req.keys) {
        if (kv_.find(k) == kv_.end()) reply.number = 0;
      }
      Reply(c, req.op, reply);
      return;
    case StoreOp::kPing: Reply(c, req.op, reply); return;
  }
}

void StoreServer::Loop::Answer(Conn& c, const StoreRequest& req) {
  StoreReply reply;
  if (req.op != StoreOp::kWait) {
    for (const auto& k : req.keys) reply.values.push_back(kv_[k]);
  }
  Reply(c, req.op, reply);
}

void StoreServer::Loop::Reply(Conn& c, StoreOp op, const StoreReply& reply) {
  c.out += EncodeReply(op, reply);
  Flush(c);
}

void StoreServer::Loop::KeyAppeared(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::unordered_set<int> fds = std::move(it->second);
  waiters_.erase(it);
  for (int fd : fds) {
    Conn* c = Find(fd);
    if (c == nullptr || !c->parked) continue;
    Parked& p = *c->parked;
    p.missing.erase(key);
    if (!p.missing.empty()) continue;
    // A key seen earlier may have been deleted since: answer only when all are here.
    for (const auto& k : p.request.keys) {
      if (kv_.find(k) == kv_.end()) p.missing.insert(k);
    }
    if (!p.missing.empty()) {
      for (const auto& k : p.missing) waiters_[k].insert(fd);
      continue;
    }
    StoreRequest req = std::move(p.request);
    Unpark(*c);
    Answer(*c, req);
    resume_.push_back(fd);
  }
}

void StoreServer::Loop::Unpark(Conn& c) {
  if (!c.parked) return;
  for (const auto& k : c.parked->missing) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    it->second.erase(c.fd.get());
    if (it->second.empty()) waiters_.erase(it);
  }
  c.parked.reset();
  --parked_count_;
}

void StoreServer::Loop::ExpireParked() {
  if (parked_count_ == 0) return;
  const auto now = Clock::now();
  for (auto& [fd, c] : conns_) {
    if (c->dead || !c->parked || c->parked->deadline > now) continue;
    Parked& p = *c->parked;
    std::vector<std::string> missing;
    for (const auto& k : p.request.keys) {
      if (p.missing.count(k)) missing.push_back(k);
    }
    StoreReply reply;
    reply.code = ReplyCode::kTimeout;
    reply.message = std::string(missing.size() == 1 ? "key " : "keys ") + QuoteKeys(missing) +
                    (missing.size() == 1 ? " was" : " were") + " not set within " + FormatDuration(p.timeout_ms);
    if (p.request.keys.size() > 1) {
      reply.message +=
          " (" + std::to_string(missing.size()) + " of " + std::to_string(p.request.keys.size()) + " keys missing)";
    }
    StoreOp op = p.request.op;
    Unpark(*c);
    Reply(*c, op, reply);
    resume_.push_back(fd);
  }
}

void StoreServer::Loop::ExpireUnauthenticated() {
  if (unauthenticated_ == 0) return;
  const auto now = Clock::now();
  for (auto& [fd, c] : conns_) {
    if (c->dead || c->authed || c->auth_deadline > now) continue;
    CHORUS_WARN("store server: dropping client " << c->peer << ": it did not authenticate within "
                                                 << FormatDuration(kAuthMs));
    Kill(*c);
  }
}

void StoreServer::Loop::Flush(Conn& c) {
  const bool was_full = c.out_pending() >= kMaxOutPending;
  while (c.out_pending() > 0) {
    ssize_t n = send(c.fd.get(), c.out.data() + c.out_off, c.out_pending(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    CHORUS_TRACE("store server: cannot reply to " << c.peer << ": " << IoError("send", errno).message());
    Kill(c);
    return;
  }
  if (c.out_pending() == 0) {
    c.out.clear();
    c.out_off = 0;
    if (c.closing) {
      Kill(c);
      return;
    }
    if (was_full) resume_.push_back(c.fd.get());
  }
  UpdateInterest(c);
}

void StoreServer::Loop::UpdateInterest(Conn& c) {
  uint32_t want = 0;
  if (!c.eof && !c.closing && c.in_pending() < c.in_limit() && c.out_pending() < kMaxOutPending) {
    want |= EPOLLIN | EPOLLRDHUP;
  }
  if (c.out_pending() > 0) want |= EPOLLOUT;
  if (want == c.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = c.fd.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) {
    Kill(c);
    return;
  }
  c.interest = want;
}

void StoreServer::Loop::Kill(Conn& c) {
  if (c.dead) return;
  if (c.closing) {
    // Closing with unread input makes the kernel send RST, which can destroy the
    // error reply before the client reads it: send FIN, discard what is readable.
    (void)shutdown(c.fd.get(), SHUT_WR);
    char buf[4096];
    for (int i = 0; i < 256 && recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0; ++i) {
    }
  }
  Unpark(c);
  if (!c.authed) --unauthenticated_;
  c.dead = true;
  dead_.push_back(c.fd.get());
}

void StoreServer::Loop::Reap() {
  for (int fd : dead_) {
    CHORUS_TRACE("store server: closing connection " << fd);
    conns_.erase(fd);  // closing the fd also removes it from the epoll set
  }
  dead_.clear();
}

namespace {

// Binds a listening socket to one address. EADDRINUSE is kUnavailable.
Result<UniqueFd> ListenOn(const SocketAddress& addr, const std::string& where, bool dual_stack) {
  UniqueFd fd(socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return IoError("store server: socket for " + where, errno);
  int one = 1;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (dual_stack) {
    int zero = 0;
    (void)setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(fd.get(), addr.get(), addr.len) != 0) {
    int err = errno;
    if (err == EADDRINUSE) {
      return Status(StatusCode::kUnavailable, "store server: " + where + " is already in use by another socket");
    }
    return IoError("store server: bind to " + where, err);
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return IoError("store server: listen on " + where, errno);
  return fd;
}

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& bind_host, uint16_t port, JobSecret secret) {
  Result<UniqueFd> listener = Status(StatusCode::kInternal, "no address tried");
  if (bind_host.empty()) {
    // Every interface: IPv6 dual-stack accepts IPv4 clients too; IPv4 where the
    // machine has no IPv6.
    SocketAddress any6;
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&any6.storage);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(port);
    any6.len = sizeof(sockaddr_in6);
    listener = ListenOn(any6, "port " + std::to_string(port) + " on every interface", true);
    if (!listener.ok() && listener.status().code() != StatusCode::kUnavailable) {
      SocketAddress any4;
      auto* a4 = reinterpret_cast<sockaddr_in*>(&any4.storage);
      a4->sin_family = AF_INET;
      a4->sin_addr.s_addr = htonl(INADDR_ANY);
      a4->sin_port = htons(port);
      any4.len = sizeof(sockaddr_in);
      listener = ListenOn(any4, "port " + std::to_string(port) + " on every interface", false);
    }
  } else {
    Result<std::vector<SocketAddress>> addrs = Resolve(bind_host, port, SOCK_STREAM, true);
    if (!addrs.ok()) return addrs.status().WithContext("store server");
    listener = ListenOn(addrs.value()[0], JoinHostPort(bind_host, port), false);
  }
  if (!listener.ok()) return listener.status();

  SocketAddress bound;
  bound.len = sizeof(bound.storage);
  if (getsockname(listener.value().get(), reinterpret_cast<sockaddr*>(&bound.storage), &bound.len) != 0) {
    return IoError("store server: getsockname", errno);
  }
  const uint16_t actual = bound.family() == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&bound.storage)->sin_port)
                                                    : ntohs(reinterpret_cast<sockaddr_in6*>(&bound.storage)->sin6_port);

  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return IoError("store server: epoll_create1", errno);
  UniqueFd stop(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!stop.valid()) return IoError("store server: eventfd", errno);
  for (int fd : {listener.value().get(), stop.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return IoError("store server: epoll_ctl", errno);
  }

  std::unique_ptr<StoreServer> server(new StoreServer());
  server->port_ = actual;
  const bool with_secret = !secret.empty();
  server->loop_ =
      std::make_unique<Loop>(std::move(listener.value()), std::move(ep), std::move(stop), std::move(secret));
  Loop* loop = server->loop_.get();
  server->thread_ = std::thread([loop] { loop->Run(); });
  CHORUS_INFO("store server listening on " << (bind_host.empty() ? std::string("*") : bind_host) << ":" << actual
                                           << (with_secret ? " (clients must prove the job secret)" : ""));
  return server;
}

void StoreServer::StopAccepting() {
  if (loop_) loop_->CloseListener();
}

StoreServer::~StoreServer() {
  if (loop_) loop_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace chorus::rendezvous
