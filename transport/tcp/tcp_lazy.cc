// CHORUS_TCP_CONNECT=lazy: a peer's sockets (nsockets x channels, as in the mesh) are
// made the first time a request needs that peer, by either rank of the pair; the
// listening socket stays open and an acceptor thread takes dials at any time.
//
// Crossing dials: each rank marks a peer kDialing before its first socket leaves, and
// its acceptor decides on a peer's socket 0 under the same lock. A dial from a lower
// rank that finds this rank dialing it is answered "crossed"; a dial from a higher rank
// is always taken. So of two crossing dials exactly the higher rank's carries the pair,
// and the lower rank waits for it; a dial that reached an idle acceptor first makes that
// acceptor wait for it instead of dialing. A socket carries data only once its verdict
// is known: the engines get a peer's sockets after every one of them was accepted.
//
// A post never waits for a dial: a request to a peer without sockets is parked in the
// peer's link, in post order, while a dialer thread dials (several at once, so first
// contact with many peers costs about one dial, not one per peer in turn).
// The hand-over posts the parked requests to the engines before the peer counts as
// connected, so a later post cannot overtake them; a failed, aborted or timed-out
// connection fails them all with its error. The acceptor looks at the timers of links
// waiting for a peer's dial.

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/fd_limit.h"
#include "common/log.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/parked_request.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport {

using tcp::UniqueFd;

namespace {
// How often the acceptor looks whether the transport is closing, and at the links
// waiting for a peer's dial.
constexpr int64_t kAcceptLookMs = 100;
// Dials in flight at once: about as many as this rank has cores (its channels, at most
// kMaxChannels), at least 2. Each mostly waits for the peer's acceptor, but where ranks
// outnumber the cores more dialers only take turns on them.
constexpr size_t kMinDialers = 2;

// Whether the peer closed `fd` (-1: no socket), on which it sends nothing before the
// pair is connected.
bool Closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

// An aborted rank says why on each data socket it drops: the peer may count the pair
// as connected already (its half of the dial or of the accept finished first), and
// there an ABORT frame reaches its engine with the reason, where a bare close reads as a
// lost connection. A socket not yet used has room for it in its buffer.
void TellAborted(int fd, const Status& reason) {
  const std::string frame = tcp::EncodeAbortFrame(reason.message());
  (void)::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}
void TellAborted(const std::vector<UniqueFd>& fds, const Status& reason) {
  for (const UniqueFd& fd : fds) {
    if (fd.valid()) TellAborted(fd.get(), reason);
  }
}

// The reason of an ABORT frame waiting whole on `fd`, a socket the peer closed before
// the pair was connected; empty where there is none.
std::string AbortReasonOn(int fd) {
  std::string buf(tcp::kFrameHeaderSize + tcp::kMaxReasonLen, '\0');
  const ssize_t got = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  if (got < static_cast<ssize_t>(tcp::kFrameHeaderSize)) return {};
  Result<tcp::FrameHeader> h = tcp::DecodeFrameHeader(reinterpret_cast<const uint8_t*>(buf.data()));
  if (!h.ok() || h->type != tcp::FrameType::kAbort || static_cast<size_t>(got) < tcp::kFrameHeaderSize + h->len)
    return {};
  return buf.substr(tcp::kFrameHeaderSize, h->len);
}

RequestPtr Failed(BasicRequest::Kind kind, int self, int peer, uint64_t tag, void* buf, size_t bytes,
                  uint64_t fingerprint, const Status& st) {
  auto req = std::make_shared<BasicRequest>(kind, self, peer, tag, buf, bytes, fingerprint);
  req->Complete(st);
  return req;
}
}  // namespace

std::string TcpTransport::PeerDesc(int peer) const {
  return "rank " + std::to_string(peer) + " (host " + peers_[peer].host + ", " + peers_[peer].address + ")";
}

Status TcpTransport::ConnectLazy(const std::vector<PeerAddress>& peers, int channels) {
  // The engines' pollers and wake-up descriptors; each peer's sockets are reserved as
  // they are made.
  CHORUS_RETURN_IF_ERROR(ReserveFds(2 * int64_t{channels},
                                    "rank " + std::to_string(rank_) + ": " + std::to_string(channels) + " TCP engines",
                                    "use fewer channels (CHORUS_TCP_LANES)"));
  peers_ = peers;
  links_ = std::vector<Link>(static_cast<size_t>(size_));
  connected_ = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) connected_[p].store(false);
  CHORUS_RETURN_IF_ERROR(StartEngines(peers, channels, std::vector<std::vector<UniqueFd>>(static_cast<size_t>(size_))));
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

Status TcpTransport::Dial(int peer, Deadline deadline, Dialed* out) {
  const std::string desc = PeerDesc(peer);
  const std::string me = "rank " + std::to_string(rank_);
  int in_flight = 1;
  {
    std::lock_guard<std::mutex> lock(link_mu_);
    if (!link_abort_.ok()) return link_abort_;
    in_flight = dials_in_flight_;
  }
  // Room for every dial in flight: the others' sockets may not be open yet.
  CHORUS_RETURN_IF_ERROR(ReserveFds(int64_t{socks_per_peer_} * in_flight,
                                    me + ": connecting to " + desc + ", " + std::to_string(opts_.nsockets) +
                                        " sockets x " + std::to_string(socks_per_peer_ / opts_.nsockets) + " channels",
                                    "use fewer sockets (CHORUS_NSOCKS_PERPEER, CHORUS_TCP_LANES)"));
  const tcp::Identity self{comm_id_, rank_, size_, socks_per_peer_, opts_.secret, /*lazy=*/true};
  // The peer listens from before it published its address until its transport is gone,
  // and its acceptor answers at once: a peer that refuses, or takes the connection but
  // says nothing, for CHORUS_PEER_TIMEOUT is dead or stopped, as a silent mesh peer is.
  const auto answer_by = [&] { return deadline.Earlier(Deadline::AfterMs(opts_.peer_timeout_ms)); };
  const std::string answer_ms = std::to_string(std::min(opts_.connect_timeout_ms, opts_.peer_timeout_ms));
  for (int i = 0; i < socks_per_peer_; ++i) {
    // The peer's kernel completes the connection without it: one not made within the
    // peer timeout (a cut link, a host gone) fails as a refused one does.
    Result<UniqueFd> fd = tcp::ConnectTcp(peers_[peer].address, opts_.socket_bufsize, answer_by());
    if (!fd.ok()) {
      const bool refused = fd.status().message().find("refused") != std::string::npos;
      const bool timed_out = fd.status().code() == StatusCode::kTimeout;
      return fd.status().WithContext(
          me + ": connecting to " + desc +
          (refused || timed_out ? std::string(refused ? " (refused" : " (no connection") + " within " + answer_ms +
                                      " ms: its process, communicator or host is gone; CHORUS_PEER_TIMEOUT)"
                                : std::string()));
    }
    {
      // An abort from now on shuts this socket down, which ends the handshake's wait.
      std::lock_guard<std::mutex> lock(link_mu_);
      if (!link_abort_.ok()) return link_abort_;
      links_[peer].dial_fd = fd.value().get();
    }
    bool was_crossed = false;
    Status st =
        tcp::ConnectorHandshake(fd.value().get(), self, peer, i, desc, answer_by(), &was_crossed, &out->peer_aborted);
    {
      std::lock_guard<std::mutex> lock(link_mu_);
      links_[peer].dial_fd = -1;
      if (!link_abort_.ok()) {
        // A handshake cut short may still be accepted where no proof follows the reply.
        if (st.ok() ? !was_crossed : opts_.secret.empty()) TellAborted(fd.value().get(), link_abort_);
        TellAborted(out->fds, link_abort_);
        return link_abort_;
      }
    }
    if (st.code() == StatusCode::kTimeout) {
      return st.WithContext(me + ": " + desc + " did not answer within " + answer_ms +
                            " ms (CHORUS_CONNECT_TIMEOUT, CHORUS_PEER_TIMEOUT)");
    }
    CHORUS_RETURN_IF_ERROR(st);
    if (was_crossed) {
      // Only a pair's first socket decides; later ones were agreed to with it.
      if (i > 0) return ProtocolError(me + ": " + desc + " answered socket " + std::to_string(i) + " \"crossed\"");
      out->crossed = true;
    }
    out->fds.push_back(std::move(fd.value()));
    if (out->crossed) break;
  }
  return Status::Ok();
}

void TcpTransport::StopDialsLocked(const Status& reason) {
  if (link_abort_.ok()) link_abort_ = reason;
  for (int p = 0; p < static_cast<int>(links_.size()); ++p) {
    Link& link = links_[p];
    // Its handshake's wait ends; the socket can still say why (TellAborted).
    if (link.dial_fd >= 0) ::shutdown(link.dial_fd, SHUT_RD);
    if (link.state == LinkState::kDialing || link.state == LinkState::kIncoming) FailLinkLocked(p, link_abort_);
  }
}

void TcpTransport::FailLinkLocked(int peer, const Status& st) {
  Link& link = links_[peer];
  link.state = LinkState::kFailed;
  link.error = st;
  if (!link_abort_.ok()) {
    TellAborted(link.incoming, link_abort_);
    // The other end of a "crossed" socket waits for this rank's dial: it learns why too.
    if (link.crossed.valid()) TellAborted(link.crossed.get(), link_abort_);
  }
  link.incoming.clear();
  link.have = 0;
  link.crossed.reset();
  for (const auto& r : link.parked)
    r->Release(Failed(r->kind, rank_, peer, r->tag, r->buf, r->bytes, r->fingerprint, st));
  link.parked.clear();
}

RequestPtr TcpTransport::PostLazy(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                                  uint64_t fingerprint) {
  std::lock_guard<std::mutex> lock(link_mu_);
  Link& link = links_[peer];
  if (!link_abort_.ok()) return Failed(kind, rank_, peer, tag, buf, bytes, fingerprint, link_abort_);
  switch (link.state) {
    case LinkState::kConnected:  // since the caller looked
      return PostNow(kind, peer, tag, buf, bytes, fingerprint);
    case LinkState::kFailed: return Failed(kind, rank_, peer, tag, buf, bytes, fingerprint, link.error);
    case LinkState::kNone:
      // Marked before the dial leaves: a lower rank's dial that comes meanwhile is
      // answered "crossed", and this dial carries the pair.
      link.state = LinkState::kDialing;
      dial_queue_.push_back(peer);
      // An idle dialer takes it, or a new one where every idle one has a dial to take.
      if (dial_queue_.size() > static_cast<size_t>(idle_dialers_) &&
          dialers_.size() < std::max(kMinDialers, engines_.size())) {
        dialers_.emplace_back([this] { DialLoop(); });
      }
      dial_cv_.notify_one();
      break;
    case LinkState::kDialing:
    case LinkState::kIncoming: break;
  }
  if (link.parked.empty()) {
    link.connect_by = Clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
  }
  // The request is released (failed at the latest) before the transport is gone.
  auto dial = [this, peer](Deadline wait) { DialNow(peer, wait); };
  link.parked.push_back(std::make_shared<tcp::ParkedRequest>(kind, rank_, peer, tag, buf, bytes, fingerprint, dial));
  return link.parked.back();
}

void TcpTransport::DialLoop() {
  std::unique_lock<std::mutex> lock(link_mu_);
  for (;;) {
    ++idle_dialers_;
    dial_cv_.wait(lock, [this] { return stop_dialing_ || !dial_queue_.empty(); });
    --idle_dialers_;
    if (stop_dialing_) return;
    const int peer = dial_queue_.front();
    dial_queue_.pop_front();
    DialLocked(lock, peer);
  }
}

void TcpTransport::DialNow(int peer, Deadline wait) {
  std::unique_lock<std::mutex> lock(link_mu_);
  const auto queued = std::find(dial_queue_.begin(), dial_queue_.end(), peer);
  if (queued == dial_queue_.end() || links_[peer].connect_by > wait.at()) return;
  dial_queue_.erase(queued);
  DialLocked(lock, peer);
}

void TcpTransport::DialLocked(std::unique_lock<std::mutex>& lock, int peer) {
  Link& link = links_[peer];
  if (link.state != LinkState::kDialing) return;  // failed or aborted while queued
  ++dials_in_flight_;
  const Deadline deadline(link.connect_by);
  lock.unlock();
  Dialed d;
  Status st = Dial(peer, deadline, &d);
  lock.lock();
  --dials_in_flight_;
  if (d.crossed) crossed_dials_.fetch_add(1, std::memory_order_relaxed);
  // The peer is higher and its dial was taken meanwhile (ours was, or will be, answered
  // "crossed"), or the link failed or was aborted: nothing more for this dial to do.
  if (link.state != LinkState::kDialing) {
    if (st.ok() && !d.crossed && !link_abort_.ok()) TellAborted(d.fds, link_abort_);
    return;
  }
  if (!st.ok() && d.peer_aborted) {
    // As a peer's ABORT frame does: this communicator is doomed too; the others hear it.
    lock.unlock();
    Abort(st);
    lock.lock();
    return;
  }
  if (!st.ok()) return FailLinkLocked(peer, st);
  if (d.crossed) {
    link.state = LinkState::kIncoming;  // the peer dials us: its dial carries the pair
    link.heard = Clock::now();
    link.crossed = std::move(d.fds[0]);
    return;
  }
  HandOverLocked(peer, std::move(d.fds));
}

Status TcpTransport::CheckLinksLocked(Clock::time_point now) {
  Status peer_aborted;
  for (int p = 0; p < size_; ++p) {
    Link& link = links_[p];
    if (link.state != LinkState::kIncoming) continue;
    // A peer that gave up its dial (it aborted, failed or was destroyed) closed the
    // sockets it made, or the one we made whose dial it answered "crossed".
    bool closed = false;
    std::string why;  // a peer that aborted said why first (TellAborted)
    const auto look = [&](const UniqueFd& fd) {
      if (!fd.valid() || !Closed(fd.get())) return;
      closed = true;
      if (why.empty()) why = AbortReasonOn(fd.get());
    };
    look(link.crossed);
    for (const UniqueFd& fd : link.incoming) look(fd);
    if (!why.empty()) {
      // As its ABORT frame would on a connected pair, the peer's abort dooms us too.
      Status st = PeerFailed(PeerDesc(p) + " aborted: " + why);
      if (peer_aborted.ok()) peer_aborted = st;
      FailLinkLocked(p, st);
      continue;
    }
    if (closed) {
      FailLinkLocked(p, PeerFailed("rank " + std::to_string(rank_) + ": " + PeerDesc(p) +
                                   " closed its connection before it was made (it aborted, failed or was destroyed)"));
      continue;
    }
    // A peer that dials us brings its sockets at once: one silent for
    // CHORUS_PEER_TIMEOUT since its last (or since its dial was known) is gone.
    if (now >= link.heard + std::chrono::milliseconds(opts_.peer_timeout_ms)) {
      FailLinkLocked(p, TimeoutError("rank " + std::to_string(rank_) + ": " + PeerDesc(p) + " began connecting (" +
                                     std::to_string(link.have) + " of " + std::to_string(socks_per_peer_) +
                                     " sockets) and brought no more within " + std::to_string(opts_.peer_timeout_ms) +
                                     " ms (CHORUS_PEER_TIMEOUT)"));
    } else if (!link.parked.empty() && now >= link.connect_by) {
      FailLinkLocked(p, TimeoutError("rank " + std::to_string(rank_) + ": no connection with " + PeerDesc(p) +
                                     " within " + std::to_string(opts_.connect_timeout_ms) +
                                     " ms (waiting for its dial; CHORUS_CONNECT_TIMEOUT)"));
    }
  }
  return peer_aborted;
}

tcp::Admission TcpTransport::AdmitLocked(int peer, int index) {
  using tcp::Admit;
  Link& link = links_[peer];
  const std::string them = "rank " + std::to_string(peer);
  if (!link_abort_.ok())
    return {Admit::kAborted, "rank " + std::to_string(rank_) + " aborted: " + link_abort_.message()};
  if (index == 0) {
    const bool take = link.state == LinkState::kNone || (link.state == LinkState::kIncoming && link.have == 0) ||
                      (link.state == LinkState::kDialing && peer > rank_);
    if (!take) {
      // A lower rank dials us only while it has no sockets to us: finding the pair
      // connected, its dial crossed ours and reached us after ours was done.
      if (link.state == LinkState::kDialing || (link.state == LinkState::kConnected && peer < rank_)) {
        return {Admit::kCrossed, {}};
      }
      if (link.state == LinkState::kFailed)
        return {Admit::kRefuse, them + "'s connection failed: " + link.error.message()};
      return {Admit::kRefuse, "duplicate connection: " + them + " is already connected or connecting"};
    }
    Status room = ReserveFds(socks_per_peer_ - 1,
                             "rank " + std::to_string(rank_) + ": accepting " + PeerDesc(peer) + ", " +
                                 std::to_string(socks_per_peer_) + " sockets",
                             "use fewer sockets (CHORUS_NSOCKS_PERPEER, CHORUS_TCP_LANES)");
    if (!room.ok()) {
      FailLinkLocked(peer, room);
      return {Admit::kRefuse, room.message()};
    }
    link.state = LinkState::kIncoming;
    link.heard = Clock::now();
    link.incoming.clear();
    link.incoming.resize(static_cast<size_t>(socks_per_peer_));
    return {Admit::kAccept, {}};
  }
  if (link.state != LinkState::kIncoming || link.have == 0 || link.incoming[index].valid()) {
    return {Admit::kRefuse, "unexpected socket " + std::to_string(index) + " from " + them};
  }
  return {Admit::kAccept, {}};
}

void TcpTransport::AcceptLoop() {
  const tcp::Identity self{comm_id_, rank_, size_, socks_per_peer_, opts_.secret, /*lazy=*/true};
  while (!stop_accepting_.load()) {
    // An engine that failed (a peer's ABORT, a silent peer) stops this rank's dials and
    // waits for dials too: they must not outlast the failure until their deadline.
    const Status failed = health();
    Status peer_aborted;
    {
      std::lock_guard<std::mutex> lock(link_mu_);
      if (!failed.ok() && link_abort_.ok()) StopDialsLocked(failed);
      peer_aborted = CheckLinksLocked(Clock::now());
    }
    if (!peer_aborted.ok()) Abort(peer_aborted);
    Result<UniqueFd> fd = tcp::AcceptTcp(listen_fd_.get(), Deadline::AfterMs(kAcceptLookMs));
    if (!fd.ok()) {
      if (fd.status().code() != StatusCode::kTimeout && !stop_accepting_.load()) {
        CHORUS_WARN("rank " << rank_ << ": accepting TCP connections: " << fd.status().message());
        std::this_thread::sleep_for(std::chrono::milliseconds(kAcceptLookMs));
      }
      continue;
    }
    const tcp::AdmitFn admit = [this](int peer, int index) {
      std::lock_guard<std::mutex> lock(link_mu_);
      return AdmitLocked(peer, index);
    };
    Result<tcp::AcceptedSocket> a =
        tcp::AcceptorHandshake(fd.value().get(), self, admit, tcp::RemoteAddressOf(fd.value().get()),
                               Deadline::AfterMs(tcp::kAcceptHandshakeMs));
    if (!a.ok()) {
      // As in the mesh: a stranger is dropped, its side gets the reason. A peer whose
      // socket 0 was taken but failed its proof may dial again (have stays 0).
      CHORUS_WARN(a.status().message());
      continue;
    }
    std::lock_guard<std::mutex> lock(link_mu_);
    Link& link = links_[a->peer];
    if (a->crossed) {
      // Our own dial carries the pair; the socket stays open until it is done or gave up.
      if (link.state == LinkState::kDialing) {
        link.crossed = std::move(fd.value());
      } else if (!link_abort_.ok()) {
        TellAborted(fd.value().get(), link_abort_);  // its peer waits for our dial
      }
      continue;
    }
    if (link.state != LinkState::kIncoming) {  // failed or aborted meanwhile
      if (!link_abort_.ok()) TellAborted(fd.value().get(), link_abort_);
      continue;
    }
    link.incoming[a->index] = std::move(fd.value());
    link.heard = Clock::now();
    if (++link.have == socks_per_peer_) HandOverLocked(a->peer, std::move(link.incoming));
  }
}

void TcpTransport::HandOverLocked(int peer, std::vector<UniqueFd> fds) {
  Link& link = links_[peer];
  // Aborted: the engines are gone; the sockets close, and the peer fails its requests naming us.
  // An engine that failed since the acceptor last looked counts as an abort already.
  if (link_abort_.ok()) {
    if (Status st = health(); !st.ok()) StopDialsLocked(st);
  }
  if (!link_abort_.ok()) {
    TellAborted(fds, link_abort_);
    return FailLinkLocked(peer, link_abort_);
  }
  for (UniqueFd& fd : fds) {
    Status st = tcp::SetDataSocketOptions(fd.get(), opts_.socket_bufsize);
    if (st.ok()) st = tcp::SetLivenessOptions(fd.get(), opts_.peer_timeout_ms);
    if (!st.ok())
      return FailLinkLocked(peer, st.WithContext("rank " + std::to_string(rank_) + ": socket to " + PeerDesc(peer)));
  }
  // Socket k x nsockets + i of the pair is socket i of channel k on both sides.
  for (size_t k = 0; k < engines_.size(); ++k) {
    std::vector<UniqueFd> mine;
    for (int i = 0; i < opts_.nsockets; ++i) mine.push_back(std::move(fds[k * opts_.nsockets + i]));
    engines_[k]->AddPeer(peer, std::move(mine));
  }
  link.state = LinkState::kConnected;
  link.incoming.clear();
  link.have = 0;
  link.crossed.reset();
  // The engines take the sockets before the parked posts, and those before any post
  // that sees the peer connected; their callers see them once it is.
  std::vector<RequestPtr> posted;
  for (const auto& r : link.parked) posted.push_back(PostNow(r->kind, peer, r->tag, r->buf, r->bytes, r->fingerprint));
  connected_[peer].store(true, std::memory_order_release);
  for (size_t i = 0; i < posted.size(); ++i) link.parked[i]->Release(std::move(posted[i]));
  link.parked.clear();
}

}  // namespace chorus::transport
