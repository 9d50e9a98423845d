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

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/fd_limit.h"
#include "common/log.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport {

using tcp::UniqueFd;

namespace {
// How often the acceptor looks whether the transport is closing.
constexpr int64_t kAcceptLookMs = 100;
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

Status TcpTransport::Dial(int peer, Deadline deadline, std::vector<UniqueFd>* fds, bool* crossed) {
  const std::string desc = PeerDesc(peer);
  const std::string me = "rank " + std::to_string(rank_);
  CHORUS_RETURN_IF_ERROR(ReserveFds(socks_per_peer_,
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
    Status st = tcp::ConnectorHandshake(fd.value().get(), self, peer, i, desc, answer_by(), &was_crossed);
    {
      std::lock_guard<std::mutex> lock(link_mu_);
      links_[peer].dial_fd = -1;
      if (!link_abort_.ok()) return link_abort_;
    }
    if (st.code() == StatusCode::kTimeout) {
      return st.WithContext(me + ": " + desc + " did not answer within " + answer_ms +
                            " ms (CHORUS_CONNECT_TIMEOUT, CHORUS_PEER_TIMEOUT)");
    }
    CHORUS_RETURN_IF_ERROR(st);
    if (was_crossed) {
      // Only a pair's first socket decides; later ones were agreed to with it.
      if (i > 0) return ProtocolError(me + ": " + desc + " answered socket " + std::to_string(i) + " \"crossed\"");
      *crossed = true;
      return Status::Ok();
    }
    fds->push_back(std::move(fd.value()));
  }
  return Status::Ok();
}

void TcpTransport::StopDialsLocked(const Status& reason) {
  if (link_abort_.ok()) link_abort_ = reason;
  for (Link& link : links_) {
    if (link.dial_fd >= 0) ::shutdown(link.dial_fd, SHUT_RDWR);
  }
  link_cv_.notify_all();
}

Status TcpTransport::EnsureConnected(int peer) {
  if (connected_[peer].load(std::memory_order_acquire)) return Status::Ok();
  const Deadline deadline = Deadline::AfterMs(opts_.connect_timeout_ms);
  std::unique_lock<std::mutex> lock(link_mu_);
  Link& link = links_[peer];
  for (;;) {
    if (!link_abort_.ok()) return link_abort_;
    switch (link.state) {
      case LinkState::kConnected: return Status::Ok();
      case LinkState::kFailed: return link.error;
      case LinkState::kNone: {
        link.state = LinkState::kDialing;
        lock.unlock();
        std::vector<UniqueFd> fds;
        bool crossed = false;
        Status st = Dial(peer, deadline, &fds, &crossed);
        lock.lock();
        if (crossed) crossed_dials_.fetch_add(1, std::memory_order_relaxed);
        // The peer is higher and its dial was taken meanwhile: ours was (or will be)
        // answered "crossed"; wait for the sockets its dial brings.
        if (link.state != LinkState::kDialing) continue;
        if (!st.ok()) {
          link.state = LinkState::kFailed;
          link.error = st;
          link_cv_.notify_all();
          return st;
        }
        if (crossed) {
          link.state = LinkState::kIncoming;  // the peer dials us: its dial carries the pair
          link.heard = Clock::now();
          continue;
        }
        HandOverLocked(peer, std::move(fds));
        continue;  // kConnected, or kFailed naming the socket option that failed
      }
      case LinkState::kDialing:  // another of our threads dials
      case LinkState::kIncoming: {
        // A peer that dials us brings its sockets at once: one silent for
        // CHORUS_PEER_TIMEOUT since its last (or since its dial was known) is gone.
        const auto silent_at = link.heard + std::chrono::milliseconds(opts_.peer_timeout_ms);
        const bool incoming = link.state == LinkState::kIncoming;
        const auto until = incoming ? std::min(deadline.at(), silent_at) : deadline.at();
        if (link_cv_.wait_until(lock, until) == std::cv_status::timeout && link.state == LinkState::kIncoming &&
            link_abort_.ok() && Clock::now() >= link.heard + std::chrono::milliseconds(opts_.peer_timeout_ms)) {
          link.state = LinkState::kFailed;
          link.error = TimeoutError("rank " + std::to_string(rank_) + ": " + PeerDesc(peer) + " began connecting (" +
                                    std::to_string(link.have) + " of " + std::to_string(socks_per_peer_) +
                                    " sockets) and brought no more within " + std::to_string(opts_.peer_timeout_ms) +
                                    " ms (CHORUS_PEER_TIMEOUT)");
          link.incoming.clear();
          link_cv_.notify_all();
          return link.error;
        }
        if (deadline.expired() && link.state != LinkState::kConnected && link.state != LinkState::kFailed &&
            link_abort_.ok()) {
          return TimeoutError("rank " + std::to_string(rank_) + ": no connection with " + PeerDesc(peer) + " within " +
                              std::to_string(opts_.connect_timeout_ms) + " ms (" +
                              (link.state == LinkState::kDialing ? "dialing it" : "waiting for its dial") +
                              "; CHORUS_CONNECT_TIMEOUT)");
        }
        break;
      }
    }
  }
}

tcp::Admission TcpTransport::AdmitLocked(int peer, int index) {
  using tcp::Admit;
  Link& link = links_[peer];
  const std::string them = "rank " + std::to_string(peer);
  if (!link_abort_.ok())
    return {Admit::kRefuse, "rank " + std::to_string(rank_) + " aborted: " + link_abort_.message()};
  if (index == 0) {
    const bool take = link.state == LinkState::kNone || (link.state == LinkState::kIncoming && link.have == 0) ||
                      (link.state == LinkState::kDialing && peer > rank_);
    if (!take) {
      // A lower rank dials us only while it has no sockets to us: finding the pair
      // connected, its dial crossed ours and reached us after ours was done.
      if (link.state == LinkState::kDialing || (link.state == LinkState::kConnected && peer < rank_)) {
        return {Admit::kCrossed, {}};
      }
      return {Admit::kRefuse, "duplicate connection: " + them + " is already connected or connecting"};
    }
    Status room = ReserveFds(socks_per_peer_ - 1,
                             "rank " + std::to_string(rank_) + ": accepting " + PeerDesc(peer) + ", " +
                                 std::to_string(socks_per_peer_) + " sockets",
                             "use fewer sockets (CHORUS_NSOCKS_PERPEER, CHORUS_TCP_LANES)");
    if (!room.ok()) {
      link.state = LinkState::kFailed;
      link.error = room;
      link_cv_.notify_all();
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
    for (auto& e : engines_) {
      if (Status st = e->health(); !st.ok()) {
        std::lock_guard<std::mutex> lock(link_mu_);
        if (link_abort_.ok()) StopDialsLocked(st);
        break;
      }
    }
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
    if (a->crossed) continue;  // the socket closes; our own dial carries the pair
    std::lock_guard<std::mutex> lock(link_mu_);
    Link& link = links_[a->peer];
    if (link.state != LinkState::kIncoming) continue;  // failed or aborted meanwhile
    link.incoming[a->index] = std::move(fd.value());
    link.heard = Clock::now();
    if (++link.have == socks_per_peer_) HandOverLocked(a->peer, std::move(link.incoming));
  }
}

void TcpTransport::HandOverLocked(int peer, std::vector<UniqueFd> fds) {
  Link& link = links_[peer];
  if (!link_abort_.ok()) {
    // The engines are gone: the sockets close, and the peer fails its requests naming us.
    link.state = LinkState::kFailed;
    link.error = link_abort_;
    link_cv_.notify_all();
    return;
  }
  for (UniqueFd& fd : fds) {
    Status st = tcp::SetDataSocketOptions(fd.get(), opts_.socket_bufsize);
    if (st.ok()) st = tcp::SetLivenessOptions(fd.get(), opts_.peer_timeout_ms);
    if (!st.ok()) {
      link.state = LinkState::kFailed;
      link.error = st.WithContext("rank " + std::to_string(rank_) + ": socket to " + PeerDesc(peer));
      link_cv_.notify_all();
      return;
    }
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
  connected_[peer].store(true, std::memory_order_release);
  link_cv_.notify_all();
}

}  // namespace chorus::transport
