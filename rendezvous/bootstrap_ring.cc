#include "rendezvous/bootstrap_ring.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/log.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/socket_io.h"

namespace chorus::rendezvous {
namespace {

// The wire format is in bootstrap_ring_wire.h, apart so that it can be fuzzed.
using namespace ring_wire;  // NOLINT(google-build-using-namespace): the one format the ring speaks

// Incoming connections still in their handshake: strangers beyond these are closed.
constexpr size_t kMaxPending = 32;
constexpr int kMaxStoreSliceMs = 200;

// Appends what `fd` has (non-blocking), at most up to `limit` bytes in `buf`; `eof` at
// the end of the stream.
Status ReadAvailable(int fd, std::string* buf, size_t limit, bool* eof, const std::string& peer) {
  char chunk[64 * 1024];
  while (buf->size() < limit) {
    const ssize_t n = recv(fd, chunk, std::min(sizeof(chunk), limit - buf->size()), 0);
    if (n > 0) {
      buf->append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      *eof = true;
      return Status::Ok();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return PeerFailed("receiving from " + peer + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<UniqueFd> Listen(const std::string& ip, std::string* address) {
  Result<std::vector<SocketAddress>> addrs = Resolve(ip, 0, SOCK_STREAM, /*passive=*/false);
  if (!addrs.ok()) return addrs.status();
  SocketAddress a = addrs.value().front();
  UniqueFd fd(socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return IoError("socket", errno);
  if (bind(fd.get(), a.get(), a.len) != 0) return IoError("bind " + NumericHost(a), errno);
  if (listen(fd.get(), 64) != 0) return IoError("listen", errno);
  a.len = sizeof(a.storage);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) {
    return IoError("getsockname", errno);
  }
  const uint16_t port = ntohs(a.family() == AF_INET ? reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_port
                                                    : reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_port);
  *address = JoinHostPort(NumericHost(a), port);
  return fd;
}

Result<UniqueFd> ConnectTo(const std::string& address, Deadline deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return ProtocolError("'" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = std::atoi(address.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return ProtocolError("'" + address + "' has no valid port");
  Result<std::vector<SocketAddress>> addrs = Resolve(host, static_cast<uint16_t>(port), SOCK_STREAM, false);
  if (!addrs.ok()) return addrs.status();
  return ConnectOnce(addrs.value(), deadline);
}

std::string PeerAddressOf(int fd) {
  SocketAddress a;
  a.len = sizeof(a.storage);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return "an unknown address";
  const uint16_t port = ntohs(a.family() == AF_INET ? reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_port
                                                    : reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_port);
  return JoinHostPort(NumericHost(a), port);
}

std::string_view View(const std::string& s) { return s; }

// An incoming connection before it proved to be the previous rank.
struct Pending {
  UniqueFd fd;
  std::string remote;
  std::string in;
  std::string hello;  // set once the hello was accepted; then the proof is awaited
  Nonce nonce{};
};

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

}  // namespace

BootstrapRing::BootstrapRing(std::string prefix, int rank, int size)
    : prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      prev_rank_((rank + size - 1) % size),
      next_rank_((rank + 1) % size) {}

BootstrapRing::~BootstrapRing() { Close(); }

void BootstrapRing::Close() {
  prev_.reset();
  next_.reset();
}

std::string BootstrapRing::What() const {
  return "bootstrap ring '" + prefix_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

std::string BootstrapRing::Key(int rank) const { return prefix_ + "ring/" + std::to_string(rank); }

Status BootstrapRing::Fail(Status st, int origin, const std::string& reason) {
  if (!failed_.ok()) return st;
  const std::string frame = Frame(kFailureFrame, static_cast<uint32_t>(st.code()), origin,
                                  std::string_view(reason).substr(0, kMaxReasonBytes));
  for (UniqueFd* fd : {&prev_, &next_}) {
    if (!fd->valid()) continue;
    // Towards next only between frames: in the middle of one it would read as data.
    const bool between_frames = fd == &prev_ ? back_out_off_ == 0 : next_ready_ && out_off_ == 0;
    if (between_frames) (void)send(fd->get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    // Reading what is there first keeps close() from resetting the connection, which
    // could drop the failure frame before the neighbour reads it.
    (void)shutdown(fd->get(), SHUT_WR);
    // Bounded: a neighbour that keeps sending does not hold this rank here.
    char drain[4096];
    ssize_t got = 0;
    for (size_t drained = 0; drained < kMaxBufferedBytes; drained += static_cast<size_t>(got)) {
      got = recv(fd->get(), drain, sizeof(drain), MSG_DONTWAIT);
      if (got <= 0) break;
    }
    fd->reset();
  }
  failed_ = st;
  return st;
}

Status BootstrapRing::FailureHeard(const std::string& buf, size_t off, int origin, size_t len, int from,
                                   uint32_t code) {
  const std::string reason = buf.substr(off + kFrameHeaderSize, len);
  const std::string side = from == prev_rank_ ? "previous" : "next";
  return Fail(Status(CodeOf(code), What() + ": rank " + std::to_string(origin) + " failed: " + reason +
                                       " (heard from rank " + std::to_string(from) + ", the " + side + " on the ring)"),
              origin, reason);
}

Status BootstrapRing::Pump(bool from_prev, int revents) {
  bool& eof = from_prev ? prev_eof_ : next_eof_;
  if (eof) return Status::Ok();
  if (Full(from_prev)) {
    // Not read on; a broken connection still ends it (what it holds is all this
    // all-gather needs from that side).
    if ((revents & (POLLHUP | POLLERR)) != 0) eof = true;
    return Status::Ok();
  }
  const int peer = from_prev ? prev_rank_ : next_rank_;
  Status st = ReadAvailable((from_prev ? prev_ : next_).get(), from_prev ? &inbox_ : &from_next_, kMaxBufferedBytes,
                            &eof, "rank " + std::to_string(peer));
  if (!st.ok()) eof = true;  // a reset: what was read still counts, then it is the end
  return Status::Ok();
}

Status BootstrapRing::CheckDuringSetUp(bool from_prev) {
  const std::string& buf = from_prev ? inbox_ : from_next_;
  const int peer = from_prev ? prev_rank_ : next_rank_;
  Result<std::optional<FrameHead>> head = PeekFrame(buf, 0);
  if (!head.ok()) return head.status().WithContext(What() + ": from rank " + std::to_string(peer));
  if (head.value() && head.value()->kind == kFailureFrame) {
    return FailureHeard(buf, 0, head.value()->origin, head.value()->len, peer, head.value()->seq);
  }
  if ((from_prev ? prev_eof_ : next_eof_) && !head.value()) {
    return PeerFailed(What() + ": rank " + std::to_string(peer) + " (" + (from_prev ? "previous" : "next") +
                      " on the ring) closed its connection during set-up");
  }
  return Status::Ok();
}

Result<std::unique_ptr<BootstrapRing>> BootstrapRing::Create(Store& store, const std::string& prefix, int rank,
                                                             int size, const std::string& bind_address,
                                                             uint64_t comm_id, const JobSecret& secret,
                                                             Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("bootstrap ring '" + prefix + "': rank " + std::to_string(rank) + " is not in [0, " +
                           std::to_string(size) + ")");
  }
  std::unique_ptr<BootstrapRing> ring(new BootstrapRing(prefix, rank, size));
  if (size == 1) return ring;
  Status st = ring->Form(store, bind_address, comm_id, secret, deadline);
  if (!st.ok()) return ring->Fail(st);
  return ring;
}

Status BootstrapRing::Form(Store& store, const std::string& bind_address, uint64_t comm_id, const JobSecret& secret,
                           Deadline deadline) {
  const std::string what = What();
  const std::string next = "rank " + std::to_string(next_rank_);
  const std::string prev = "rank " + std::to_string(prev_rank_);
  std::string address;
  Result<UniqueFd> listener = Listen(bind_address, &address);
  if (!listener.ok()) return listener.status().WithContext(what + ": listening on " + bind_address);
  Status set = store.Set(Key(rank_), address);
  if (!set.ok()) return set.WithContext(what);
  const auto start = Clock::now();

  Hello hello{comm_id, rank_, next_rank_, size_, !secret.empty(), {}};
  if (hello.secret) {
    Result<Nonce> nonce = NewNonce();
    if (!nonce.ok()) return nonce.status().WithContext(what);
    hello.nonce = nonce.value();
  }
  const std::string hello_bytes = Encode(hello);
  enum class Out { kNoAddress, kAwaitReply, kDone };
  Out out = Out::kNoAddress;
  std::string next_address, reply;
  std::vector<Pending> pending;
  int slice_ms = 10;

  // The previous rank's hello, checked; why it is refused, or nothing.
  auto refusal = [&](const Hello& h) -> std::optional<std::string> {
    if (h.comm_id != comm_id) return "another communicator (comm id differs)";
    if (h.size != size_) {
      return "world size " + std::to_string(h.size) + ", here " + std::to_string(size_);
    }
    if (h.receiver != rank_ || h.sender != prev_rank_) {
      return "rank " + std::to_string(h.sender) + " meant for rank " + std::to_string(h.receiver) + ", but only " +
             prev + " connects to rank " + std::to_string(rank_);
    }
    if (h.secret != !secret.empty()) {
      return h.secret ? "it has a job secret and this rank has none" : "this rank requires a job secret; it has none";
    }
    if (prev_.valid()) return prev + " is already connected";
    return std::nullopt;
  };
  auto drop = [&](size_t i, const std::string& why) {
    CHORUS_WARN(what << ": ignored a connection from " << pending[i].remote << ": " << why);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };

  Status st = [&]() -> Status {
    while (out != Out::kDone || !prev_.valid()) {
      if (out == Out::kNoAddress) {
        // A short wait on the store, then the sockets: the previous rank is admitted (and
        // can hear of a failure) while this one waits for its next rank's address.
        Result<std::string> got =
            store.Get(Key(next_rank_), std::chrono::milliseconds(std::min(slice_ms, deadline.RemainingMs())));
        if (got.ok()) {
          next_address = got.value();
          Result<UniqueFd> fd = ConnectTo(next_address, deadline);
          if (!fd.ok()) return fd.status().WithContext(what + ": connecting to " + next + " at " + next_address);
          next_ = std::move(fd.value());
          CHORUS_RETURN_IF_ERROR(SendAll(next_.get(), hello_bytes, deadline, next + " at " + next_address));
          out = Out::kAwaitReply;
        } else if (got.status().code() != StatusCode::kTimeout) {
          return got.status().WithContext(what);
        } else {
          slice_ms = std::min(slice_ms * 2, kMaxStoreSliceMs);
        }
      }
      if (deadline.expired()) {
        const std::string waited = " within " + FormatDuration(ElapsedMs(start));
        const std::string of = " of " + std::to_string(size_);
        if (out == Out::kNoAddress) {
          return TimeoutError(what + ": " + next + of + " never arrived" + waited + " (its ring address, key '" +
                              Key(next_rank_) + "', never came)");
        }
        if (!prev_.valid()) {
          return TimeoutError(what + ": " + prev + of + " never arrived" + waited +
                              " (it never connected to this rank)");
        }
        return TimeoutError(what + ": " + next + " at " + next_address + " did not answer the ring handshake" + waited);
      }
      std::vector<pollfd> fds;
      fds.push_back({prev_.valid() ? -1 : listener.value().get(), POLLIN, 0});
      // A full side is not polled for input (it would always be ready); hang-ups still count.
      fds.push_back({next_eof_ ? -1 : next_.get(), static_cast<short>(Full(false) ? 0 : POLLIN), 0});
      fds.push_back({prev_eof_ ? -1 : prev_.get(), static_cast<short>(Full(true) ? 0 : POLLIN), 0});
      for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
      const int n = poll(fds.data(), fds.size(), out == Out::kNoAddress ? 0 : deadline.RemainingMs());
      if (n < 0 && errno != EINTR) return IoError(what + ": poll", errno);
      if (n <= 0) continue;

      if (fds[1].revents != 0 && out == Out::kAwaitReply) {
        bool eof = false;
        // The whole reply's length, checked against the cap before reading on: a
        // stranger at that address cannot make this rank buffer more.
        Result<size_t> full = reply.size() < kReplySize ? Result<size_t>(kReplySize) : ReplyLength(reply);
        Status rs = full.ok() ? ReadAvailable(next_.get(), &reply, full.value(), &eof, next) : Status::Ok();
        if (full.ok() && reply.size() >= kReplySize) full = ReplyLength(reply);
        if (!full.ok()) {
          return ProtocolError(what + ": " + next + " at " + next_address +
                               " did not answer as a chorus bootstrap ring: " + full.status().message());
        }
        if (reply.size() < full.value()) {
          if (!rs.ok() || eof) {
            return PeerFailed(what + ": " + next + " at " + next_address +
                              " closed the connection during the handshake");
          }
          continue;
        }
        const Result<Reply> decoded = DecodeReply(reply);
        if (!decoded.ok()) {
          return ProtocolError(what + ": " + next + " at " + next_address +
                               " did not answer as a chorus bootstrap ring: " + decoded.status().message());
        }
        const Reply& r = decoded.value();
        if (r.failed) {
          // The acceptor's failure, told to a connection it never took.
          const Failure told = ParseFailedReason(r.reason);
          return Status(told.code, what + ": " + next + " failed: " + told.message);
        }
        if (!r.accept) {
          return MismatchError(what + ": " + next + " at " + next_address +
                               " refused the ring connection: " + r.reason);
        }
        if (r.acceptor != next_rank_ || r.size != size_ || r.secret != hello.secret) {
          return MismatchError(what + ": " + next_address + " answered as rank " + std::to_string(r.acceptor) + " of " +
                               std::to_string(r.size) + (r.secret ? " with" : " without") + " a job secret; expected " +
                               next + " of " + std::to_string(size_));
        }
        if (hello.secret) {
          if (!secret.Verify(r.mac.data(), kAcceptorLabel, {View(hello_bytes), chorus::View(r.nonce)})) {
            return MismatchError(what + ": " + next + " at " + next_address +
                                 " did not prove the job secret (its CHORUS_SECRET differs, or another job's "
                                 "process listens at that address)");
          }
          const Sha256Digest proof = secret.Mac(kConnectorLabel, {View(hello_bytes), chorus::View(r.nonce)});
          CHORUS_RETURN_IF_ERROR(SendAll(next_.get(),
                                         std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()),
                                         deadline, next));
        }
        out = Out::kDone;
        next_ready_ = true;
      } else if (fds[1].revents != 0) {
        // The next rank may be in its all-gather already: its frames wait in from_next_.
        CHORUS_RETURN_IF_ERROR(Pump(/*from_prev=*/false, fds[1].revents));
        CHORUS_RETURN_IF_ERROR(CheckDuringSetUp(/*from_prev=*/false));
      }

      if (fds[2].revents != 0) {
        CHORUS_RETURN_IF_ERROR(Pump(/*from_prev=*/true, fds[2].revents));
        CHORUS_RETURN_IF_ERROR(CheckDuringSetUp(/*from_prev=*/true));
      }

      for (size_t i = pending.size(); i-- > 0;) {
        if (fds[3 + i].revents == 0) continue;
        Pending& p = pending[i];
        const bool proving = !p.hello.empty();
        bool eof = false;
        Status rs = ReadAvailable(p.fd.get(), &p.in, proving ? kProofSize : kHelloSize, &eof, p.remote);
        if (!rs.ok() || (eof && p.in.size() < (proving ? kProofSize : kHelloSize))) {
          drop(i, "it closed during the handshake");
          continue;
        }
        if (!proving && p.in.size() == kHelloSize) {
          const std::optional<Hello> h = DecodeHello(p.in);
          if (!h) {
            drop(i, "not a chorus bootstrap ring hello");
            continue;
          }
          const std::optional<std::string> why = refusal(*h);
          Reply r;
          r.accept = !why;
          r.acceptor = rank_;
          r.size = size_;
          r.secret = !secret.empty();
          if (why) r.reason = "rank " + std::to_string(rank_) + " refused: " + *why;
          if (r.accept && r.secret) {
            Result<Nonce> nonce = NewNonce();
            if (!nonce.ok()) return nonce.status().WithContext(what);
            r.nonce = p.nonce = nonce.value();
            r.mac = secret.Mac(kAcceptorLabel, {View(p.in), chorus::View(r.nonce)});
          }
          // A small reply to an empty socket buffer: a stranger that reads nothing holds this up no longer.
          Status sent = SendAll(p.fd.get(), Encode(r), deadline.Earlier(Deadline::AfterMs(1000)), p.remote);
          if (why || !sent.ok()) {
            drop(i, why ? *why : sent.message());
          } else if (!r.secret) {
            prev_ = std::move(p.fd);
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          } else {
            p.hello = p.in;
            p.in.clear();
          }
        } else if (proving && p.in.size() == kProofSize) {
          if (prev_.valid()) {
            drop(i, prev + " is already connected");
          } else if (!secret.Verify(reinterpret_cast<const uint8_t*>(p.in.data()), kConnectorLabel,
                                    {View(p.hello), chorus::View(p.nonce)})) {
            drop(i, "it did not prove the job secret");
          } else {
            prev_ = std::move(p.fd);
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          }
        }
      }

      if (fds[0].revents != 0) {
        for (;;) {
          UniqueFd fd(accept4(listener.value().get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
          if (!fd.valid()) break;
          if (pending.size() >= kMaxPending) continue;  // closed: too many strangers at once
          SetNoDelay(fd.get());
          Pending p;
          p.remote = PeerAddressOf(fd.get());
          p.fd = std::move(fd);
          pending.push_back(std::move(p));
        }
      }
    }
    return Status::Ok();
  }();
  // Connections still in their handshake hear why, so that the failure goes on round
  // the ring rather than as a closed connection.
  if (!st.ok()) {
    // Those still waiting in the listen queue too.
    for (;;) {
      UniqueFd fd(accept4(listener.value().get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid() || pending.size() >= kMaxPending) break;
      Pending p;
      p.fd = std::move(fd);
      pending.push_back(std::move(p));
    }
    for (Pending& p : pending) {
      std::string msg;
      if (p.hello.empty()) {
        Reply r;
        r.failed = true;
        r.acceptor = rank_;
        r.size = size_;
        r.reason = FailedReason(st.code(), st.message());
        msg = Encode(r);
      } else {
        msg = Frame(kFailureFrame, static_cast<uint32_t>(st.code()), rank_,
                    std::string_view(st.message()).substr(0, kMaxReasonBytes));
      }
      (void)send(p.fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  return st;
}

// The frames at the head of one way's input: records stored, those the neighbour
// on the far side still needs queued for it. Stops at an incomplete frame.
Status BootstrapRing::TakeFrames(Way& way, std::vector<std::string>* records) {
  std::string& buf = way.from_prev ? inbox_ : from_next_;
  std::string& sink = way.from_prev ? out_ : back_out_;
  const int from = way.from_prev ? prev_rank_ : next_rank_;
  size_t off = 0;
  Status st;
  for (;;) {
    Result<std::optional<FrameHead>> head = PeekFrame(buf, off);
    if (!head.ok()) {
      st = Fail(head.status().WithContext(What() + ": from rank " + std::to_string(from)));
      break;
    }
    if (!head.value()) break;
    const FrameHead& h = *head.value();
    if (h.kind == kFailureFrame) {
      st = FailureHeard(buf, off, h.origin, h.len, from, h.seq);
      break;
    }
    if (way.got == way.want) break;  // the rest belongs to the next all-gather
    if (h.seq != seq_ || h.origin != way.expect) {
      st = Fail(ProtocolError(What() + ": rank " + std::to_string(from) + " sent the record of rank " +
                              std::to_string(h.origin) + " for all-gather " + std::to_string(h.seq) +
                              "; expected rank " + std::to_string(way.expect) + " for all-gather " +
                              std::to_string(seq_)));
      break;
    }
    (*records)[h.origin] = buf.substr(off + kFrameHeaderSize, h.len);
    ++way.got;
    if (way.queued < way.to_queue) {
      sink.append(buf, off, kFrameHeaderSize + h.len);
      ++way.queued;
    }
    off += kFrameHeaderSize + h.len;
    way.expect = (way.expect + (way.from_prev ? size_ - 1 : 1)) % size_;
  }
  if (failed_.ok()) buf.erase(0, off);
  return st;
}

Result<std::vector<std::string>> BootstrapRing::AllGather(const std::string& mine, Deadline deadline) {
  if (!failed_.ok()) return failed_;
  if (size_ == 1) return std::vector<std::string>{mine};
  const std::string what =
      "ring all-gather '" + prefix_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  if (mine.size() > kMaxRecordBytes) {
    return InvalidArgument(what + ": a record of " + std::to_string(mine.size()) + " bytes is larger than the " +
                           std::to_string(kMaxRecordBytes) + " allowed");
  }
  if (!prev_.valid() || !next_.valid()) return AbortedError(what + ": the ring is closed");
  const std::string next = "rank " + std::to_string(next_rank_);
  const std::string prev = "rank " + std::to_string(prev_rank_);
  if (prev_eof_ || next_eof_) {
    return Fail(PeerFailed(what + ": " + (prev_eof_ ? prev : next) + " has closed its ring connection"));
  }
  ++seq_;
  const auto start = Clock::now();
  // Both ways round the ring, so that a record takes at most n/2 hops: forward (from
  // lower ranks) the nearest `ahead` records, backward the other `behind`.
  const int ahead = size_ / 2, behind = (size_ - 1) / 2;
  Way fwd{true, ahead, 0, prev_rank_, 0, std::max(ahead - 1, 0)};
  Way bwd{false, behind, 0, next_rank_, 0, std::max(behind - 1, 0)};
  std::vector<std::string> records(size_);
  records[rank_] = mine;
  const std::string own = Frame(kDataFrame, seq_, rank_, mine);
  out_ = own;
  out_off_ = 0;
  back_out_ = behind > 0 ? own : std::string();
  back_out_off_ = 0;
  auto missing = [&] {
    std::vector<int> m;
    for (int d = fwd.got + 1; d <= ahead; ++d) m.push_back((rank_ + size_ - d) % size_);
    for (int d = bwd.got + 1; d <= behind; ++d) m.push_back((rank_ + d) % size_);
    std::sort(m.begin(), m.end());
    return (m.size() == 1 ? "rank " : "ranks ") + FormatRankList(m) + " of " + std::to_string(size_);
  };
  // Whether a neighbour has all it gets from this rank and sent all this rank needs
  // from it: it may then finish and close first.
  auto done_with = [&](bool prev_side) {
    const Way& in = prev_side ? fwd : bwd;
    const Way& out_way = prev_side ? bwd : fwd;
    const size_t off = prev_side ? back_out_off_ : out_off_;
    const size_t size = prev_side ? back_out_.size() : out_.size();
    return in.got == in.want && out_way.queued == out_way.to_queue && off == size;
  };

  for (;;) {
    CHORUS_RETURN_IF_ERROR(TakeFrames(fwd, &records));
    CHORUS_RETURN_IF_ERROR(TakeFrames(bwd, &records));
    if (done_with(true) && done_with(false)) {
      out_.clear();
      back_out_.clear();
      out_off_ = back_out_off_ = 0;
      return records;
    }
    for (const bool prev_side : {true, false}) {
      if ((prev_side ? prev_eof_ : next_eof_) && !done_with(prev_side)) {
        return Fail(PeerFailed(what + ": " + (prev_side ? prev + " (previous" : next + " (next") +
                               " on the ring) closed its connection; " + missing() + " never arrived"));
      }
    }
    // A full side is not polled for input: its first frame, whole, is for a later
    // all-gather (TakeFrames took the rest), so nothing more is needed from it in this one.
    pollfd fds[2] = {
        {prev_eof_ ? -1 : prev_.get(),
         static_cast<short>((Full(true) ? 0 : POLLIN) | (back_out_off_ < back_out_.size() ? POLLOUT : 0)), 0},
        {next_eof_ ? -1 : next_.get(),
         static_cast<short>((Full(false) ? 0 : POLLIN) | (out_off_ < out_.size() ? POLLOUT : 0)), 0}};
    const int n = poll(fds, 2, deadline.RemainingMs());
    if (n < 0 && errno != EINTR) return Fail(IoError(what + ": poll", errno));
    if (n == 0) {
      const std::string waited = " within " + FormatDuration(ElapsedMs(start));
      if (fwd.got < ahead || bwd.got < behind) {
        const std::string on = fwd.got < ahead && bwd.got < behind ? prev + " and " + next
                               : fwd.got < ahead                   ? prev + ", previous on the ring"
                                                                   : next + ", next on the ring";
        return Fail(TimeoutError(what + ": " + missing() + " never arrived" + waited + " (waiting on " + on + ")"));
      }
      return Fail(TimeoutError(what + ": the neighbours on the ring took no more records" + waited));
    }
    if (n < 0) continue;
    for (const bool prev_side : {true, false}) {
      const pollfd& p = fds[prev_side ? 0 : 1];
      std::string& out = prev_side ? back_out_ : out_;
      size_t& off = prev_side ? back_out_off_ : out_off_;
      if ((p.revents & POLLOUT) != 0) {
        const ssize_t sent =
            send(prev_side ? prev_.get() : next_.get(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (sent > 0) {
          off += static_cast<size_t>(sent);
          if (off == out.size()) {
            out.clear();
            off = 0;
          }
        } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return Fail(PeerFailed(what + ": sending to " + (prev_side ? prev : next) + ": " + std::strerror(errno)));
        }
      }
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) CHORUS_RETURN_IF_ERROR(Pump(prev_side, p.revents));
    }
  }
}

}  // namespace chorus::rendezvous
