#include "transport/tcp/tcp_transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "common/fd_limit.h"
#include "common/log.h"
#include "transport/matching.h"
#include "transport/parts_request.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/poller.h"

namespace chorus::transport {

using tcp::UniqueFd;

namespace {
// A message is cut across channels into parts of at least this size (a part smaller than
// this costs its hand-off more than its copy saves), and only from twice that: a
// smaller one would go whole to a channel thread, which may be asleep, and wake the
// waiter too (docs/design/tcp_transport.md). Bytes.
constexpr size_t kPartMin = 128 << 10;
constexpr size_t kChannelsFrom = 2 * kPartMin;
// Room for the mesh's descriptors: sockets to every peer, and a poller and a wake-up
// descriptor per channel's engine.
Status ReserveMeshFds(int rank, int size, int nsockets, int channels) {
  return ReserveFds(int64_t{size - 1} * nsockets * channels + 2 * channels,
                    "rank " + std::to_string(rank) + ": the TCP mesh of " + std::to_string(size - 1) + " peers x " +
                        std::to_string(nsockets) + " sockets x " + std::to_string(channels) + " channels",
                    "use fewer sockets (CHORUS_NSOCKS_PERPEER, CHORUS_TCP_LANES)");
}

}  // namespace

int AutoChannels(int host_cores, int ranks_on_host) {
  return std::clamp(std::max(1, host_cores) / std::max(1, ranks_on_host), 1, kMaxChannels);
}

TcpTransport::TcpTransport(int rank, int size, uint64_t comm_id, TcpOptions opts)
    : rank_(rank), size_(size), comm_id_(comm_id), opts_(std::move(opts)) {}

TcpTransport::~TcpTransport() {
  std::vector<std::thread> dialers;
  {
    // Dials in flight end, and requests still waiting for them fail.
    std::lock_guard<std::mutex> lock(link_mu_);
    stop_dialing_ = true;
    if (!links_.empty()) StopDialsLocked(AbortedError("rank " + std::to_string(rank_) + ": transport destroyed"));
    dialers.swap(dialers_);
  }
  dial_cv_.notify_all();
  for (std::thread& d : dialers) d.join();
  if (acceptor_.joinable()) {
    stop_accepting_.store(true);
    ::shutdown(listen_fd_.get(), SHUT_RDWR);  // wakes its accept
    acceptor_.join();
  }
  engines_.clear();
}

Result<std::unique_ptr<TcpTransport>> TcpTransport::Listen(int rank, int size, uint64_t comm_id, TcpOptions opts) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("TCP transport: rank " + std::to_string(rank) + " is not in a world of size " +
                           std::to_string(size));
  }
  if (opts.nsockets < 1 || opts.nsockets > 64) {
    return InvalidArgument("TCP transport: " + std::to_string(opts.nsockets) +
                           " sockets per peer requested (CHORUS_NSOCKS_PERPEER); allowed 1..64");
  }
  // The fewest the mesh can need (one channel), before this rank publishes its address:
  // a limit that cannot hold it fails set-up while the others still wait at the store,
  // which tells them at once. Connect checks again for the channels agreed.
  // Lazy: one peer's sockets, the fewest a rank that talks at all needs.
  CHORUS_RETURN_IF_ERROR(
      ReserveMeshFds(rank, opts.connect == ConnectMode::kLazy ? std::min(size, 2) : size, opts.nsockets, 1));
  std::unique_ptr<TcpTransport> t(new TcpTransport(rank, size, comm_id, opts));
  t->use_uring_ = opts.engine == EngineKind::kUring;
  if (t->use_uring_) {
    Status probe = tcp::ProbeUring();
    if (!probe.ok()) return probe.WithContext("CHORUS_TCP_ENGINE=uring but io_uring cannot be used here");
  }
  Result<UniqueFd> fd = tcp::ListenTcp(opts.bind_address, 4 * size * opts.nsockets * kMaxChannels + 16,
                                       opts.socket_bufsize, &t->address_);
  if (!fd.ok()) return fd.status().WithContext("rank " + std::to_string(rank) + ": listening on " + opts.bind_address);
  t->listen_fd_ = std::move(fd.value());
  return t;
}

Status TcpTransport::AcceptAll(std::vector<std::vector<UniqueFd>>* sockets, const std::vector<PeerAddress>& peers,
                               Deadline deadline) {
  const tcp::Identity self{comm_id_, rank_, size_, socks_per_peer_, opts_.secret};
  std::vector<std::vector<bool>> have(static_cast<size_t>(size_), std::vector<bool>(socks_per_peer_, false));
  int missing = (size_ - 1 - rank_) * socks_per_peer_;
  std::string refused;  // the last connection we turned away, for the timeout message
  while (missing > 0) {
    Result<UniqueFd> fd = tcp::AcceptTcp(listen_fd_.get(), deadline);
    if (!fd.ok()) {
      std::string who;
      for (int p = rank_ + 1; p < size_; ++p) {
        for (int i = 0; i < socks_per_peer_; ++i) {
          if (!have[p][i]) {
            who += (who.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p) + " (host " + peers[p].host +
                   ", " + peers[p].address + ")";
            break;
          }
        }
      }
      return Status(fd.status().code(), "rank " + std::to_string(rank_) + ": no connection from " + who + ": " +
                                            fd.status().message() + (refused.empty() ? "" : "; refused: " + refused));
    }
    Result<tcp::AcceptedSocket> a =
        tcp::AcceptorHandshake(fd.value().get(), self, have, tcp::RemoteAddressOf(fd.value().get()),
                               deadline.Earlier(Deadline::AfterMs(tcp::kAcceptHandshakeMs)));
    if (!a.ok()) {
      // A stray, misconfigured or unauthenticated client must not stop the mesh nor take
      // a rank's slot: it is dropped and the real peer is still awaited; its own side
      // gets the reason.
      CHORUS_WARN(a.status().message());
      refused = a.status().message();
      continue;
    }
    have[a->peer][a->index] = true;
    (*sockets)[a->peer][a->index] = std::move(fd.value());
    --missing;
  }
  return Status::Ok();
}

Status TcpTransport::Connect(const std::vector<PeerAddress>& peers, Deadline deadline) {
  if (!engines_.empty()) return InvalidArgument("rank " + std::to_string(rank_) + ": TCP transport already connected");
  if (static_cast<int>(peers.size()) != size_) {
    return InvalidArgument("rank " + std::to_string(rank_) + ": " + std::to_string(peers.size()) +
                           " peer addresses for a world of size " + std::to_string(size_));
  }
  int channels = kMaxChannels;
  for (const PeerAddress& a : peers) channels = std::min(channels, std::max(1, a.channels));
  socks_per_peer_ = opts_.nsockets * channels;
  if (opts_.connect == ConnectMode::kLazy) return ConnectLazy(peers, channels);
  CHORUS_RETURN_IF_ERROR(ReserveMeshFds(rank_, size_, opts_.nsockets, channels));
  std::vector<std::vector<UniqueFd>> sockets(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) sockets[p].resize(static_cast<size_t>(socks_per_peer_));
  }
  // Accept from higher ranks while connecting to lower ones.
  Status accept_status;
  std::thread acceptor([&] { accept_status = AcceptAll(&sockets, peers, deadline); });
  Status connect_status;
  const tcp::Identity self{comm_id_, rank_, size_, socks_per_peer_, opts_.secret};
  for (int p = 0; p < rank_ && connect_status.ok(); ++p) {
    const std::string desc = "rank " + std::to_string(p) + " (host " + peers[p].host + ", " + peers[p].address + ")";
    for (int i = 0; i < socks_per_peer_ && connect_status.ok(); ++i) {
      Result<UniqueFd> fd = tcp::ConnectTcp(peers[p].address, opts_.socket_bufsize, deadline);
      if (!fd.ok()) {
        connect_status = fd.status().WithContext("rank " + std::to_string(rank_) + ": connecting to " + desc);
        break;
      }
      connect_status = tcp::ConnectorHandshake(fd.value().get(), self, p, i, desc, deadline);
      if (connect_status.ok()) sockets[p][i] = std::move(fd.value());
    }
  }
  // On a failed connect the acceptor may wait for peers that will never come; closing
  // the listening socket's readiness is not portable, so it runs out its deadline
  // only when nothing else failed.
  if (!connect_status.ok()) ::shutdown(listen_fd_.get(), SHUT_RDWR);
  acceptor.join();
  if (!connect_status.ok()) return connect_status;
  CHORUS_RETURN_IF_ERROR(accept_status);
  listen_fd_.reset();
  for (auto& v : sockets) {
    for (UniqueFd& fd : v) {
      CHORUS_RETURN_IF_ERROR(tcp::SetDataSocketOptions(fd.get(), opts_.socket_bufsize));
      CHORUS_RETURN_IF_ERROR(tcp::SetLivenessOptions(fd.get(), opts_.peer_timeout_ms));
    }
  }

  return StartEngines(peers, channels, std::move(sockets));
}

Status TcpTransport::StartEngines(const std::vector<PeerAddress>& peers, int channels,
                                  std::vector<std::vector<UniqueFd>> sockets) {
  tcp::EngineOptions eo;
  eo.rank = rank_;
  eo.size = size_;
  eo.nsockets = opts_.nsockets;
  eo.stripe_min_bytes = opts_.stripe_min_bytes;
  eo.spin_us = opts_.spin_us;
  eo.timeout_ms = opts_.timeout_ms;
  eo.peer_timeout_ms = opts_.peer_timeout_ms;
  eo.use_uring = use_uring_;
  eo.early_cache_bytes = opts_.early_cache_bytes;
  eo.rendezvous_all_from = opts_.rendezvous_all_from;
  eo.pause_above = opts_.pause_above;
  eo.resume_below = opts_.resume_below;
  eo.max_conns = (size_ - 1) * opts_.nsockets;
  // Channel k: sockets [k x nsockets, (k+1) x nsockets) of every peer.
  for (int k = 0; k < channels; ++k) {
    std::vector<std::vector<UniqueFd>> mine(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      for (int i = 0; p != rank_ && !sockets[p].empty() && i < opts_.nsockets; ++i) {
        mine[p].push_back(std::move(sockets[p][k * opts_.nsockets + i]));
      }
    }
    std::vector<tcp::PeerInfo> infos;
    for (const PeerAddress& a : peers) infos.push_back({a.host, a.address});
    eo.app_progress = k == 0;
    Result<std::unique_ptr<tcp::Engine>> e = tcp::Engine::Start(eo, std::move(infos), std::move(mine));
    if (!e.ok()) {
      engines_.clear();
      return e.status().WithContext("rank " + std::to_string(rank_) + ": TCP channel " + std::to_string(k));
    }
    engines_.push_back(std::move(e.value()));
  }
  if (!pre_connect_error_.ok()) Abort(pre_connect_error_);
  CHORUS_INFO("rank " << rank_ << ": " << Describe());
  return Status::Ok();
}

std::string TcpTransport::engine_name() const {
  return engines_.empty() ? std::string("none") : engines_[0]->engine_name();
}

int TcpTransport::PartsOf(int peer, uint64_t tag, size_t bytes) const {
  // Only collectives' messages: their sizes agree on both sides (the call's fingerprint
  // says so first), and they pace themselves. A point-to-point message of another size
  // than its Recv must fail both sides naming both sizes; cut differently on each side,
  // the parts beyond the Recv's would wait for a READY that never comes.
  if (peer == rank_ || engines_.size() < 2 || !IsCollectiveTag(tag) || bytes < kChannelsFrom) return 0;
  return static_cast<int>(std::min<size_t>(engines_.size() - 1, bytes / kPartMin));
}

RequestPtr TcpTransport::Post(bool send, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  const auto kind = send ? BasicRequest::Kind::kSend : BasicRequest::Kind::kRecv;
  Status bad = ValidatePost(rank_, size_, send, peer, buf, bytes);
  if (bad.ok() && engines_.empty()) {
    bad = pre_connect_error_.ok()
              ? Unavailable("rank " + std::to_string(rank_) + ": TCP transport used before Connect()")
              : pre_connect_error_;
  }
  if (!bad.ok()) {
    auto req = std::make_shared<BasicRequest>(kind, rank_, peer, tag, buf, bytes, fingerprint);
    req->Complete(bad);
    return req;
  }
  if (opts_.connect == ConnectMode::kLazy && peer != rank_ && !connected_[peer].load(std::memory_order_acquire)) {
    return PostLazy(kind, peer, tag, buf, bytes, fingerprint);
  }
  return PostNow(kind, peer, tag, buf, bytes, fingerprint);
}

RequestPtr TcpTransport::PostNow(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                                 uint64_t fingerprint) {
  const int parts = PartsOf(peer, tag, bytes);
  if (parts == 0) return engines_[0]->Post(kind, peer, tag, buf, bytes, fingerprint);
  // Equal parts (the last takes the remainder) on consecutive channels after channel 0, from
  // one the tag picks (its step and call number: both sides pick alike), so that a
  // call's messages, fewer parts each than there are channels, use every channel in turn.
  const uint64_t bulk = engines_.size() - 1;
  const uint64_t first = (tag + TagGroup(tag)) % bulk;
  auto channel = [&](int k) { return engines_[1 + (first + static_cast<uint64_t>(k)) % bulk].get(); };
  if (parts == 1) return channel(0)->Post(kind, peer, tag, buf, bytes, fingerprint);
  std::vector<RequestPtr> reqs(static_cast<size_t>(parts));
  const size_t each = bytes / static_cast<size_t>(parts);
  for (int k = 0; k < parts; ++k) {
    const size_t at = each * static_cast<size_t>(k);
    const size_t len = k == parts - 1 ? bytes - at : each;
    reqs[k] = channel(k)->Post(kind, peer, tag, static_cast<char*>(buf) + at, len, fingerprint);
  }
  return std::make_shared<PartsRequest>(std::move(reqs), bytes);
}

RequestPtr TcpTransport::Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint) {
  return Post(true, peer, tag, const_cast<void*>(buf), bytes, fingerprint);
}

RequestPtr TcpTransport::Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  return Post(false, peer, tag, buf, bytes, fingerprint);
}

void TcpTransport::ReleaseTags(uint64_t first, uint64_t last) {
  for (auto& e : engines_) e->ReleaseTags(first, last);
}

void TcpTransport::Abort(const Status& reason) {
  if (!engines_.empty() && opts_.connect == ConnectMode::kLazy) {
    // Dials and waits for a peer's dial stop; later dials are refused with the reason.
    std::lock_guard<std::mutex> lock(link_mu_);
    StopDialsLocked(reason);
  }
  if (!engines_.empty()) {
    for (auto& e : engines_) e->Abort(reason);
  } else if (pre_connect_error_.ok()) {
    pre_connect_error_ = reason;
  }
}

void TcpTransport::Progress() {
  if (!engines_.empty()) engines_[0]->Progress();  // the other channels' threads drive them
}

Status TcpTransport::health() {
  if (engines_.empty()) return pre_connect_error_;
  for (auto& e : engines_) {
    if (Status st = e->health(); !st.ok()) return st;
  }
  return Status::Ok();
}

TrafficCounters TcpTransport::counters() const {
  TrafficCounters sum;
  for (const auto& e : engines_) {
    const TrafficCounters c = e->counters();
    sum.early_messages += c.early_messages;
    sum.early_bytes += c.early_bytes;
  }
  return sum;
}

int TcpTransport::connected_peers() const {
  if (engines_.empty()) return 0;
  if (opts_.connect == ConnectMode::kEager) return size_ - 1;
  int n = 0;
  for (int p = 0; p < size_; ++p) n += connected_[p].load(std::memory_order_acquire) ? 1 : 0;
  return n;
}

std::string TcpTransport::Describe() const {
  const int channels = std::max<int>(1, static_cast<int>(engines_.size()));
  return "tcp/" + engine_name() + " on " + address_ + ", " + std::to_string(channels) +
         (channels == 1 ? " channel, " : " channels, ") + std::to_string(opts_.nsockets) + " sockets per peer" +
         (channels == 1 ? "" : " and channel") + ", buffers " + std::to_string(opts_.socket_bufsize >> 10) +
         " KiB, stripes from " + std::to_string(opts_.stripe_min_bytes >> 10) + " KiB" +
         (opts_.connect == ConnectMode::kLazy ? ", connections made when first needed" : "");
}

}  // namespace chorus::transport
