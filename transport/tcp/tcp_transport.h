// chorus's TCP transport: `nsockets` TCP connections per peer and channel (to the
// peers some request needed, ConnectMode::kLazy, the default; kEager: a full mesh at
// Connect), each channel driven by its own progress engine (epoll, driven by the
// waiting threads; or io_uring). The wire format is in wire.h, the matching and
// failure rules in engine.h.
//
// Channels: one engine moves bytes at what one core copies (loopback TCP copies every
// byte twice, into and out of the kernel). With several channels, channel 0 carries the
// small messages and the point-to-point ones, driven by the threads that wait on them
// (application progress: no hand-off between threads for a short message). The other
// channels carry the collectives' messages from 256 KiB, each cut into parts of at least 128 KiB,
// a part per channel from a channel the tag picks, each sent and received by its channel's
// engine thread, while the caller's thread reduces what arrived; both sides cut alike,
// since they know the size and the tag.
//
// Set-up is two-phase because addresses are exchanged by the caller's bootstrap:
//   auto t = TcpTransport::Listen(rank, size, comm_id, opts);   // publish t->address()
//   t->Connect(all_peers_addresses, deadline);                   // then Send/Recv
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "transport/early_hold.h"
#include "transport/request.h"
#include "transport/tcp/socket_util.h"
#include "transport/transport.h"

namespace chorus::transport {

namespace tcp {
class Engine;
class ParkedRequest;
struct Admission;
}  // namespace tcp

// Each channel's progress engine: epoll, whose sockets the waiting application thread may
// drive itself (application progress: no thread hand-off per message; see tcp/engine.h),
// or io_uring, with an engine thread of its own.
enum class EngineKind { kEpoll, kUring };
// When a peer's sockets are made: all at Connect (a full mesh), or the first time a
// request needs that peer (CHORUS_TCP_CONNECT=lazy; tcp_lazy.cc).
enum class ConnectMode { kEager, kLazy };

struct TcpOptions {
  EngineKind engine = EngineKind::kEpoll;
  ConnectMode connect = ConnectMode::kLazy;
  int64_t connect_timeout_ms = 5 * 60 * 1000;  // lazy: a peer's sockets are made within this (CHORUS_CONNECT_TIMEOUT)
  int nsockets = 2;                            // sockets per peer; large messages are striped
  int64_t socket_bufsize = 4 << 20;            // SO_SNDBUF/SO_RCVBUF (0 = kernel default)
  int64_t stripe_min_bytes = 256 << 10;        // messages at least this large use every socket
  int64_t spin_us = 0;                         // poll this long after activity (CHORUS_SPIN_US)
  std::string bind_address = "127.0.0.1";
  int64_t timeout_ms = 30 * 60 * 1000;             // per-request deadline, enforced by the engine
  int64_t peer_timeout_ms = 30 * 1000;             // a silent peer we wait on fails (CHORUS_PEER_TIMEOUT)
  int64_t early_cache_bytes = int64_t{256} << 20;  // buffers of early messages kept (CHORUS_SCRATCH_CACHE)
  uint64_t rendezvous_all_from = UINT64_MAX;       // tests: see tcp::EngineOptions
  uint64_t pause_above = kDefaultPauseAbove;       // early bytes held from a peer before it is told to PAUSE
  uint64_t resume_below = kDefaultResumeBelow;     // and RESUME (CHORUS_EARLY_PAUSE / _RESUME)
  JobSecret secret;  // CHORUS_SECRET: every connection proves it (tcp/wire.h); empty: none
};

struct PeerAddress {
  std::string address;  // "ip:port"
  std::string host;     // hostname, for error messages
  int channels = 1;     // the channels this rank wants: the mesh has the fewest any rank wants
};

// Channels wanted with CHORUS_TCP_LANES unset: a channel per core of each rank of the host,
// at most kMaxChannels (throughput still grew at eight: docs/design/tcp_transport.md).
constexpr int kMaxChannels = 8;
int AutoChannels(int host_cores, int ranks_on_host);

class TcpTransport final : public Transport {
 public:
  // Opens the listening socket (ephemeral port on opts.bind_address).
  static Result<std::unique_ptr<TcpTransport>> Listen(int rank, int size, uint64_t comm_id, TcpOptions opts);
  ~TcpTransport() override;

  // "ip:port" to publish through the bootstrap.
  std::string address() const { return address_; }
  // Eager: connects the mesh (the higher rank of each pair connects, the lower accepts);
  // lazy: records whom to dial. Either way agrees the fewest channels any rank wants,
  // and starts an engine per channel. `peers` is indexed
  // by rank; the address of this rank's entry is ignored.
  Status Connect(const std::vector<PeerAddress>& peers, Deadline deadline);
  // "io_uring" or "epoll" once connected.
  std::string engine_name() const;
  int channels() const { return static_cast<int>(engines_.size()); }
  // Peers this rank has sockets to: all of them once an eager Connect succeeded; in lazy
  // mode those some request needed so far (either side's).
  int connected_peers() const;
  // Lazy mode: this rank's dials answered "crossed" (the peer's own dial carried the pair).
  int crossed_dials() const { return crossed_dials_.load(std::memory_order_relaxed); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  RequestPtr Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint = 0) override;
  void ReleaseTags(uint64_t first, uint64_t last) override;
  void Progress() override;
  void Abort(const Status& reason) override;
  Status health() override;
  std::string Describe() const override;
  TrafficCounters counters() const override;

 private:
  TcpTransport(int rank, int size, uint64_t comm_id, TcpOptions opts);
  RequestPtr Post(bool send, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);
  // Posts to the engines (a peer with sockets, or this rank).
  RequestPtr PostNow(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);
  // How many parts a message of `bytes` with `tag` is cut into, on channels 1, 2, ...
  // (0: it goes whole on channel 0).
  int PartsOf(int peer, uint64_t tag, size_t bytes) const;
  Status AcceptAll(std::vector<std::vector<tcp::UniqueFd>>* sockets, const std::vector<PeerAddress>& peers,
                   Deadline deadline);
  // Starts an engine per channel with `sockets` (sockets[peer][channel x nsockets + i];
  // empty in lazy mode).
  Status StartEngines(const std::vector<PeerAddress>& peers, int channels,
                      std::vector<std::vector<tcp::UniqueFd>> sockets);

  // ---- Lazy mode (tcp_lazy.cc) ----
  // A pair's sockets are made by whichever rank needs the other first; when both dial
  // at once, the higher rank's dial carries the pair and the lower one's is answered
  // "crossed" (never used for data). Posts to a peer being connected wait in its link,
  // in post order, while dialer threads dial (about one per core of the rank).
  enum class LinkState { kNone, kDialing, kIncoming, kConnected, kFailed };
  struct Link {
    LinkState state = LinkState::kNone;
    std::vector<tcp::UniqueFd> incoming;  // kIncoming: the sockets accepted so far, by index
    int have = 0;
    Status error;             // kFailed
    int dial_fd = -1;         // the socket our dial is handshaking on (an abort shuts it down)
    Clock::time_point heard;  // kIncoming: when the peer's dial last brought a socket
    std::vector<std::shared_ptr<tcp::ParkedRequest>> parked;  // posted before the sockets came, in order
    Clock::time_point connect_by;                             // parked: CHORUS_CONNECT_TIMEOUT runs out
    // The socket of a crossed dial, kept open by both ranks while the higher one dials:
    // its closing tells the lower rank (kIncoming) that the higher one gave up.
    tcp::UniqueFd crossed;
  };
  struct Dialed {
    std::vector<tcp::UniqueFd> fds;  // the pair's sockets; crossed: the crossed socket
    bool crossed = false;            // the peer's own dial carries the pair
    bool peer_aborted = false;       // refused: the peer's communicator aborted
  };
  Status ConnectLazy(const std::vector<PeerAddress>& peers, int channels);
  // A post to a peer without sockets: parked until they come (a dial queued unless one
  // is under way either way), or failed with the connection's error.
  RequestPtr PostLazy(BasicRequest::Kind kind, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint);
  void DialLoop();
  // A waiting thread's help: dials `peer` itself if no dialer took its dial yet and
  // the dial's deadline comes no later than `wait` (the wait then keeps its deadline).
  void DialNow(int peer, Deadline wait);
  // Dials `peer` (queued kDialing) with the lock released meanwhile.
  void DialLocked(std::unique_lock<std::mutex>& lock, int peer);
  Status Dial(int peer, Deadline deadline, Dialed* out);
  void AcceptLoop();
  // Fails links whose peer's dial went silent, or that waited past the connect timeout.
  // Returns a peer's abort found on a socket it closed mid-dial (this rank aborts too).
  Status CheckLinksLocked(Clock::time_point now);
  // The link fails for good: its parked requests and its later posts get `st`.
  void FailLinkLocked(int peer, const Status& st);
  // Records the abort's reason (the first one), ends dials in flight and fails the
  // requests waiting for them.
  void StopDialsLocked(const Status& reason);
  tcp::Admission AdmitLocked(int peer, int index);
  // Hands `fds` to the engines (socket channel x nsockets + i to channel's engine), then
  // posts the link's parked requests, before any later post.
  void HandOverLocked(int peer, std::vector<tcp::UniqueFd> fds);
  std::string PeerDesc(int peer) const;

  const int rank_;
  const int size_;
  const uint64_t comm_id_;
  const TcpOptions opts_;
  tcp::UniqueFd listen_fd_;
  std::string address_;
  bool use_uring_ = true;
  int socks_per_peer_ = 0;                             // nsockets x channels, once Connect agreed on the channels
  std::vector<std::unique_ptr<tcp::Engine>> engines_;  // one per channel, once connected
  Status pre_connect_error_;                           // Abort before Connect

  std::vector<PeerAddress> peers_;  // lazy: whom to dial
  mutable std::mutex link_mu_;
  std::condition_variable dial_cv_;                 // dialers wait for dial_queue_
  std::vector<Link> links_;                         // by peer, under link_mu_
  std::deque<int> dial_queue_;                      // peers to dial, under link_mu_
  std::vector<std::thread> dialers_;                // under link_mu_
  int idle_dialers_ = 0;                            // under link_mu_
  int dials_in_flight_ = 0;                         // under link_mu_
  bool stop_dialing_ = false;                       // under link_mu_: the transport is going
  std::unique_ptr<std::atomic<bool>[]> connected_;  // by peer: links_[peer] is kConnected
  Status link_abort_;                               // Abort after Connect: no more connections
  std::atomic<bool> stop_accepting_{false};
  std::atomic<int> crossed_dials_{0};
  std::thread acceptor_;
};

}  // namespace chorus::transport
