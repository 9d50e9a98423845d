// CHORUS_TCP_CONNECT=lazy: sockets made the first time a request needs a peer. Crossing
// dials (both ranks of a pair sending to each other first), peers that never answer,
// requests parked while their peer is dialed (order, failure, abort), and the
// descriptor limit met at one more peer. The transport contract in lazy mode
// is transport_test.cc's "epoll_lazy".
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/fd_limit.h"
#include "tests/util/slowdown.h"
#include "transport/tag.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/wire.h"

namespace chorus::transport {
namespace {

Deadline Soon() { return Deadline::After(::chorus::testing::Scaled(std::chrono::seconds(20))); }

struct LazyOptions {
  int nsockets = 2;
  int channels = 2;
  int64_t connect_timeout_ms = 20000;
  int64_t peer_timeout_ms = 30000;
  std::string secret;
};

// n lazy transports on loopback, connected (addresses recorded, engines started).
std::vector<std::unique_ptr<TcpTransport>> LazyWorld(int n, const LazyOptions& lo, uint64_t comm_id) {
  std::vector<std::unique_ptr<TcpTransport>> ts;
  std::vector<PeerAddress> addrs;
  for (int r = 0; r < n; ++r) {
    TcpOptions o;
    o.connect = ConnectMode::kLazy;
    o.nsockets = lo.nsockets;
    o.socket_bufsize = 1 << 20;
    o.connect_timeout_ms = ::chorus::testing::Scaled(std::chrono::milliseconds(lo.connect_timeout_ms)).count();
    o.peer_timeout_ms = lo.peer_timeout_ms;
    if (!lo.secret.empty()) o.secret = JobSecret(lo.secret);
    auto t = TcpTransport::Listen(r, n, comm_id, o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    addrs.push_back({t.value()->address(), "host" + std::to_string(r), lo.channels});
    ts.push_back(std::move(t.value()));
  }
  // Lazy: Connect waits for nobody, so one thread does every rank.
  for (auto& t : ts) {
    Status st = t->Connect(addrs, Soon());
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return {};
  }
  return ts;
}

std::vector<char> Pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed * 131 + static_cast<int>(i * 7));
  return v;
}

TEST(TcpLazy, NothingIsConnectedUntilARequestNeedsIt) {
  auto t = LazyWorld(3, {}, 11);
  ASSERT_EQ(t.size(), 3u);
  for (auto& x : t) EXPECT_EQ(x->connected_peers(), 0);
  auto out = Pattern(4096, 1);
  std::vector<char> in(out.size());
  auto r = t[2]->Recv(0, 5, in.data(), in.size());
  auto s = t[0]->Send(2, 5, out.data(), out.size());
  ASSERT_TRUE(r->Wait(Soon()).ok()) << r->status().ToString();
  ASSERT_TRUE(s->Wait(Soon()).ok()) << s->status().ToString();
  EXPECT_EQ(in, out);
  EXPECT_EQ(t[0]->connected_peers(), 1);
  EXPECT_EQ(t[1]->connected_peers(), 0);
  EXPECT_EQ(t[2]->connected_peers(), 1);
}

// A plain TCP connection to `address` that never says anything: the acceptor behind
// it takes it first and waits on its Hello until it closes.
UniqueFd Blocker(const std::string& address) {
  Result<UniqueFd> fd = tcp::ConnectTcp(address, 0, Soon());
  EXPECT_TRUE(fd.ok()) << fd.status().ToString();
  return fd.ok() ? std::move(fd.value()) : UniqueFd();
}

// Both ranks of a pair send to each other first, at once, on a fresh world each round
// (every other round with a job secret: its proof still guards every socket kept).
// Both acceptors are held by a silent connection while the two dials leave, so that
// the dials cross. Every message arrives once and intact, each side ends with one peer
// connected, and the lower rank's dials were the ones answered "crossed".
TEST(TcpLazy, CrossingDialsLoseAndDuplicateNothing) {
  constexpr int kRounds = 20;
  int crossed_low = 0, crossed_high = 0;
  for (int round = 0; round < kRounds; ++round) {
    LazyOptions lo;
    lo.secret = round % 2 == 0 ? "crossing" : "";
    auto t = LazyWorld(2, lo, 100 + static_cast<uint64_t>(round));
    ASSERT_EQ(t.size(), 2u);
    UniqueFd hold0 = Blocker(t[0]->address()), hold1 = Blocker(t[1]->address());
    std::atomic<int> started{0};
    std::string errors[2];
    auto side = [&](int me) {
      const int peer = 1 - me;
      const auto small = Pattern(64, me);
      const auto large = Pattern(size_t{1} << 20, me + 10);  // a collective's: cut across both channels
      std::vector<char> in_small(small.size()), in_large(large.size());
      started.fetch_add(1);
      auto s1 = t[me]->Send(peer, 1, small.data(), small.size());
      auto s2 = t[me]->Send(peer, CollectiveTag(0, 1), large.data(), large.size());
      auto r1 = t[me]->Recv(peer, 1, in_small.data(), in_small.size());
      auto r2 = t[me]->Recv(peer, CollectiveTag(0, 1), in_large.data(), in_large.size());
      for (auto* q : {&s1, &s2, &r1, &r2}) {
        Status st = (*q)->Wait(Soon());
        if (!st.ok()) errors[me] += st.ToString() + "; ";
      }
      if (in_small != Pattern(64, peer)) errors[me] += "small message corrupt; ";
      if (in_large != Pattern(size_t{1} << 20, peer + 10)) errors[me] += "large message corrupt; ";
    };
    std::thread a(side, 0), b(side, 1);
    while (started.load() < 2) std::this_thread::yield();
    // Not an assertion: the dials most likely left by now; the test checks correctness
    // either way and counts the crossings below.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    hold0.reset();
    hold1.reset();
    a.join();
    b.join();
    EXPECT_EQ(errors[0], "") << "round " << round;
    EXPECT_EQ(errors[1], "") << "round " << round;
    EXPECT_EQ(t[0]->connected_peers(), 1);
    EXPECT_EQ(t[1]->connected_peers(), 1);
    crossed_low += t[0]->crossed_dials();
    crossed_high += t[1]->crossed_dials();
    // Nothing stray after the first messages: a second exchange still matches.
    int x = 7, y = 0;
    auto s = t[1]->Send(0, 2, &x, sizeof(x));
    ASSERT_TRUE(t[0]->Recv(1, 2, &y, sizeof(y))->Wait(Soon()).ok());
    ASSERT_TRUE(s->Wait(Soon()).ok());
    EXPECT_EQ(y, 7);
  }
  EXPECT_GT(crossed_low, 0) << "no round crossed";
  EXPECT_EQ(crossed_high, 0);
}

// Every rank of four sends to every other at once: six pairs cross at once.
TEST(TcpLazy, AllPairsDialingAtOnce) {
  constexpr int kN = 4;
  auto t = LazyWorld(kN, {}, 77);
  ASSERT_EQ(t.size(), static_cast<size_t>(kN));
  std::vector<std::string> errors(kN);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int me = 0; me < kN; ++me) {
    threads.emplace_back([&, me] {
      std::vector<int> out(kN, me), in(kN, -1);
      std::vector<RequestPtr> reqs;
      ready.fetch_add(1);
      while (ready.load() < kN) {
      }
      for (int p = 0; p < kN; ++p) {
        if (p == me) continue;
        reqs.push_back(t[me]->Send(p, 3, &out[p], sizeof(int)));
        reqs.push_back(t[me]->Recv(p, 3, &in[p], sizeof(int)));
      }
      for (auto& r : reqs) {
        Status st = r->Wait(Soon());
        if (!st.ok()) errors[me] += st.ToString() + "; ";
      }
      for (int p = 0; p < kN; ++p) {
        if (p != me && in[p] != p) errors[me] += "from rank " + std::to_string(p) + ": " + std::to_string(in[p]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(t[r]->connected_peers(), kN - 1);
  }
}

// The peer's address takes connections into its backlog but nothing answers the
// handshake: the request fails naming the peer's rank, host and address, and so does
// the next one (no second wait).
TEST(TcpLazy, APeerThatNeverAnswersIsNamed) {
  std::string silent;
  Result<UniqueFd> listening = tcp::ListenTcp("127.0.0.1", 64, 0, &silent);
  ASSERT_TRUE(listening.ok());
  TcpOptions o;
  o.connect = ConnectMode::kLazy;
  o.connect_timeout_ms = 300;
  auto t = TcpTransport::Listen(0, 2, 5, o);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.value()->Connect({{t.value()->address(), "host0"}, {silent, "quiet-host"}}, Soon()).ok());
  int x = 1;
  Status st = t.value()->Send(1, 1, &x, sizeof(x))->Wait(Soon());
  EXPECT_FALSE(st.ok());
  for (const std::string& want : {std::string("rank 1"), std::string("quiet-host"), silent}) {
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  }
  Status again = t.value()->Recv(1, 1, &x, sizeof(x))->Wait(Soon());
  EXPECT_EQ(again.message(), st.message());
  EXPECT_EQ(t.value()->connected_peers(), 0);
}

// Nothing listens at the peer's address (it never called Listen, or went away).
TEST(TcpLazy, APeerThatNeverListenedIsNamed) {
  std::string gone;
  {
    Result<UniqueFd> closed = tcp::ListenTcp("127.0.0.1", 1, 0, &gone);
    ASSERT_TRUE(closed.ok());
  }
  TcpOptions o;
  o.connect = ConnectMode::kLazy;
  o.connect_timeout_ms = 300;
  auto t = TcpTransport::Listen(1, 2, 5, o);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.value()->Connect({{gone, "gone-host"}, {t.value()->address(), "host1"}}, Soon()).ok());
  int x = 0;
  Status st = t.value()->Recv(0, 1, &x, sizeof(x))->Wait(Soon());
  EXPECT_FALSE(st.ok());
  for (const std::string& want : {std::string("rank 0"), std::string("gone-host"), gone}) {
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  }
}

// The handshake's refusals, now met at a first request rather than at Connect: a
// wrong communicator id or a job secret on one side fails both sides' requests, each
// naming what differs (tcp_transport_test checks the mesh's Connect alike).
TEST(TcpLazy, AWrongCommunicatorOrSecretFailsBothSidesNamingIt) {
  struct Case {
    uint64_t id0, id1;
    std::string secret0, want0, want1;
  };
  for (const Case& c : {Case{0x1111, 0x2222, "", "1111", "2222"}, Case{9, 9, "open sesame", "rank 0", "job secret"}}) {
    std::vector<std::unique_ptr<TcpTransport>> t;
    std::vector<PeerAddress> addrs;
    for (int r = 0; r < 2; ++r) {
      TcpOptions o;
      o.connect = ConnectMode::kLazy;
      if (r == 0 && !c.secret0.empty()) o.secret = JobSecret(c.secret0);
      auto x = TcpTransport::Listen(r, 2, r == 0 ? c.id0 : c.id1, o);
      ASSERT_TRUE(x.ok()) << x.status().ToString();
      addrs.push_back({x.value()->address(), "host" + std::to_string(r)});
      t.push_back(std::move(x.value()));
    }
    for (auto& x : t) ASSERT_TRUE(x->Connect(addrs, Soon()).ok());
    int a = 1, b = 0;
    Status s0;
    std::thread r0([&] { s0 = t[0]->Recv(1, 1, &b, sizeof(b))->Wait(Soon()); });
    Status s1 = t[1]->Send(0, 1, &a, sizeof(a))->Wait(Soon());
    r0.join();
    for (const Status& st : {s0, s1}) {
      EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.ToString();
      EXPECT_NE(st.message().find(c.want0), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(c.want1), std::string::npos) << st.message();
    }
    EXPECT_EQ(t[0]->connected_peers() + t[1]->connected_peers(), 0);
  }
}

// A peer listens from before it publishes its address until its transport is gone: a
// dial refused (the peer died) or taken but unanswered (the peer is stopped) fails
// after CHORUS_PEER_TIMEOUT naming it, as a silent mesh peer does, not after the far
// longer connect timeout (the test would run out first).
TEST(TcpLazy, ADeadOrStoppedPeerFailsAtThePeerTimeout) {
  for (const bool dead : {true, false}) {
    std::string address;
    Result<UniqueFd> listening = tcp::ListenTcp("127.0.0.1", 64, 0, &address);
    ASSERT_TRUE(listening.ok());
    if (dead) listening.value().reset();
    TcpOptions o;
    o.connect = ConnectMode::kLazy;
    o.connect_timeout_ms = 60 * 60 * 1000;
    o.peer_timeout_ms = 300;
    auto t = TcpTransport::Listen(1, 2, 5, o);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(t.value()->Connect({{address, "peer-host"}, {t.value()->address(), "host1"}}, Soon()).ok());
    // Several requests parked behind the one dial: all fail with its error.
    int x = 0, y = 1, z = 0;
    std::vector<RequestPtr> reqs = {t.value()->Recv(0, 1, &x, sizeof(x)), t.value()->Send(0, 1, &y, sizeof(y)),
                                    t.value()->Recv(0, 2, &z, sizeof(z))};
    for (auto& r : reqs) {
      Status st = r->Wait(Soon());
      EXPECT_FALSE(st.ok());
      for (const std::string& want :
           {std::string("rank 0"), std::string("peer-host"), std::string("CHORUS_PEER_TIMEOUT")}) {
        EXPECT_NE(st.message().find(want), std::string::npos) << (dead ? "dead: " : "stopped: ") << st.message();
      }
    }
    // The link failed for good: a later post gets the same error at once.
    Status again = t.value()->Send(0, 3, &y, sizeof(y))->Wait(Soon());
    EXPECT_EQ(again.message(), reqs[0]->status().message());
  }
}

// An Abort ends a dial in flight (the peer took the connection and says nothing): the
// request fails with the abort's reason, not at a deadline.
TEST(TcpLazy, AnAbortEndsADialInFlight) {
  std::string silent;
  Result<UniqueFd> listening = tcp::ListenTcp("127.0.0.1", 64, 0, &silent);
  ASSERT_TRUE(listening.ok());
  TcpOptions o;
  o.connect = ConnectMode::kLazy;
  o.connect_timeout_ms = 60 * 60 * 1000;
  o.peer_timeout_ms = 60 * 60 * 1000;
  auto t = TcpTransport::Listen(0, 2, 5, o);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.value()->Connect({{t.value()->address(), "host0"}, {silent, "quiet-host"}}, Soon()).ok());
  Status st;
  std::thread sender([&] {
    int x = 1;
    st = t.value()->Send(1, 1, &x, sizeof(x))->Wait(Soon());
  });
  // The dial is in flight once its connection reached the silent listener.
  Result<UniqueFd> taken = tcp::AcceptTcp(listening.value().get(), Soon());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  t.value()->Abort(AbortedError("the test gave up"));
  sender.join();
  EXPECT_NE(st.message().find("the test gave up"), std::string::npos) << st.message();
}

// A post returns while its peer is dialed (here: taken and never answered), and a Wait
// on it keeps its deadline. An Abort then fails every parked request, of both peers
// (one's dial taken and unanswered, the other's in flight or queued), with the abort's
// reason; later posts too.
TEST(TcpLazy, AnAbortFailsTheRequestsWaitingForADial) {
  std::string silent1, silent2;
  Result<UniqueFd> l1 = tcp::ListenTcp("127.0.0.1", 64, 0, &silent1);
  Result<UniqueFd> l2 = tcp::ListenTcp("127.0.0.1", 64, 0, &silent2);
  ASSERT_TRUE(l1.ok() && l2.ok());
  TcpOptions o;
  o.connect = ConnectMode::kLazy;
  o.connect_timeout_ms = 60 * 60 * 1000;
  o.peer_timeout_ms = 60 * 60 * 1000;
  auto t = TcpTransport::Listen(0, 3, 5, o);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(
      t.value()->Connect({{t.value()->address(), "host0"}, {silent1, "quiet1"}, {silent2, "quiet2"}}, Soon()).ok());
  int x[6] = {};
  std::vector<RequestPtr> reqs;
  for (int i = 0; i < 3; ++i) {
    reqs.push_back(t.value()->Send(1, 1, &x[i], sizeof(int)));
    reqs.push_back(t.value()->Recv(2, 1, &x[3 + i], sizeof(int)));
  }
  Result<UniqueFd> taken = tcp::AcceptTcp(l1.value().get(), Soon());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  for (auto& r : reqs) EXPECT_FALSE(r->Test());
  Status early = reqs[0]->Wait(Deadline::AfterMs(10));
  EXPECT_EQ(early.code(), StatusCode::kTimeout) << early.ToString();
  EXPECT_NE(early.message().find("connecting to rank 1"), std::string::npos) << early.message();
  t.value()->Abort(AbortedError("the test gave up"));
  reqs.push_back(t.value()->Send(2, 2, &x[0], sizeof(int)));
  for (auto& r : reqs) {
    Status st = r->Wait(Soon());
    EXPECT_NE(st.message().find("the test gave up"), std::string::npos) << st.message();
  }
  EXPECT_EQ(t.value()->connected_peers(), 0);
}

// Many peers posted to before any is connected: a first all-to-all of 16 ranks, each
// rank's thread posting to all 15 peers at once, completes with every message intact.
TEST(TcpLazy, AFirstAllToAllOfSixteenRanks) {
  constexpr int kN = 16;
  auto t = LazyWorld(kN, {}, 78);
  ASSERT_EQ(t.size(), static_cast<size_t>(kN));
  std::vector<std::string> errors(kN);
  std::vector<std::thread> threads;
  for (int me = 0; me < kN; ++me) {
    threads.emplace_back([&, me] {
      std::vector<int> out(kN), in(kN, -1);
      std::vector<RequestPtr> reqs;
      for (int p = 0; p < kN; ++p) {
        if (p == me) continue;
        out[p] = me * 100 + p;
        reqs.push_back(t[me]->Send(p, CollectiveTag(0, 1), &out[p], sizeof(int)));
        reqs.push_back(t[me]->Recv(p, CollectiveTag(0, 1), &in[p], sizeof(int)));
      }
      for (auto& r : reqs) {
        Status st = r->Wait(Soon());
        if (!st.ok()) errors[me] += st.ToString() + "; ";
      }
      for (int p = 0; p < kN; ++p) {
        if (p != me && in[p] != p * 100 + me)
          errors[me] += "from rank " + std::to_string(p) + ": " + std::to_string(in[p]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(t[r]->connected_peers(), kN - 1);
  }
}

// Messages of one tag posted before the pair is connected (parked), while its sockets
// are handed over, and after, on both sides (both dial): the n-th Recv gets the n-th
// message. The receiver's acceptor is held so that the first posts wait for the dial.
TEST(TcpLazy, OrderIsKeptAcrossTheConnection) {
  constexpr int kMsgs = 300;
  for (int round = 0; round < 4; ++round) {
    auto t = LazyWorld(2, {}, 200 + static_cast<uint64_t>(round));
    ASSERT_EQ(t.size(), 2u);
    UniqueFd hold0 = Blocker(t[0]->address()), hold1 = Blocker(t[1]->address());
    std::vector<int> out(kMsgs), in(kMsgs, -1);
    std::vector<RequestPtr> sends, recvs;
    std::thread receiver([&] {
      for (int i = 0; i < kMsgs; ++i) recvs.push_back(t[1]->Recv(0, 4, &in[i], sizeof(int)));
    });
    for (int i = 0; i < kMsgs; ++i) {
      out[i] = i;
      sends.push_back(t[0]->Send(1, 4, &out[i], sizeof(int)));
      if (i == kMsgs / 4) {
        hold0.reset();
        hold1.reset();
      }
    }
    receiver.join();
    for (auto& r : sends) ASSERT_TRUE(r->Wait(Soon()).ok()) << r->status().ToString();
    for (auto& r : recvs) ASSERT_TRUE(r->Wait(Soon()).ok()) << r->status().ToString();
    for (int i = 0; i < kMsgs; ++i) ASSERT_EQ(in[i], i) << "round " << round;
  }
}

// The higher rank of a crossing pair answered the lower one's dial "crossed" and is
// destroyed before its own dial got through: the lower rank's waiting requests fail
// naming it as soon as its acceptor is free to look, not at the (here endless) peer
// timeout.
TEST(TcpLazy, AHigherRankGoneBeforeItsCrossingDialIsNamed) {
  LazyOptions lo;
  lo.peer_timeout_ms = 60 * 60 * 1000;
  auto t = LazyWorld(2, lo, 300);
  ASSERT_EQ(t.size(), 2u);
  UniqueFd hold0 = Blocker(t[0]->address()), hold1 = Blocker(t[1]->address());
  int x = 0, y = 1;
  auto r = t[0]->Recv(1, 1, &x, sizeof(x));
  auto s = t[1]->Send(0, 1, &y, sizeof(y));
  hold1.reset();  // rank 1 answers rank 0's dial; rank 1's own waits behind hold0
  while (t[0]->crossed_dials() == 0) std::this_thread::yield();
  t[1].reset();
  hold0.reset();
  Status st = r->Wait(Soon());
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 (host host1"), std::string::npos) << st.message();
  EXPECT_TRUE(s->Test());
}

// One side of a pair's handshake, played by the test: the Hello of `sender`'s socket
// `index` to `receiver` (comm 5, two ranks, two sockets per pair, no secret).
tcp::Hello TestHello(int sender, int receiver, int index) {
  tcp::Hello h;
  h.comm_id = 5;
  h.sender = sender;
  h.receiver = receiver;
  h.world_size = 2;
  h.socket_index = index;
  h.nsockets = 2;
  h.lazy = true;
  return h;
}

// The reason of the ABORT frame that comes next on `fd`; the error where another frame
// or none comes.
Result<std::string> NextAbortReason(int fd) {
  uint8_t head[tcp::kFrameHeaderSize];
  CHORUS_RETURN_IF_ERROR(tcp::RecvAll(fd, head, sizeof(head), Soon(), "the frame"));
  Result<tcp::FrameHeader> h = tcp::DecodeFrameHeader(head);
  if (!h.ok()) return h.status();
  if (h->type != tcp::FrameType::kAbort) return ProtocolError("not an ABORT frame");
  std::string reason(h->len, '\0');
  CHORUS_RETURN_IF_ERROR(tcp::RecvAll(fd, reason.data(), reason.size(), Soon(), "the reason"));
  return reason;
}

// Rank 0's socket 0 to the rank 1 listening at `address`: the Hello sent, the Reply
// (fixed part) read.
Result<tcp::Reply> HelloFromRankZero(const std::string& address, UniqueFd* out) {
  Result<UniqueFd> fd = tcp::ConnectTcp(address, 0, Soon());
  if (!fd.ok()) return fd.status();
  *out = std::move(fd.value());
  uint8_t hello[tcp::kHelloSize];
  tcp::EncodeHello(TestHello(0, 1, 0), hello);
  CHORUS_RETURN_IF_ERROR(tcp::SendAll(out->get(), hello, sizeof(hello), Soon(), "hello"));
  uint8_t reply[tcp::kReplySize];
  CHORUS_RETURN_IF_ERROR(tcp::RecvAll(out->get(), reply, sizeof(reply), Soon(), "reply"));
  uint32_t reason_len = 0;
  return tcp::DecodeReply(reply, &reason_len);
}

// That socket, accepted.
Result<UniqueFd> SocketZeroAccepted(const std::string& address) {
  UniqueFd fd;
  Result<tcp::Reply> r = HelloFromRankZero(address, &fd);
  if (!r.ok()) return r.status();
  if (!r->accept) return ProtocolError("socket 0 was not accepted");
  return fd;
}

// What an aborting rank writes on a socket before it closes it.
void SendAbortFrame(int fd, const std::string& why) {
  const std::string frame = tcp::EncodeAbortFrame(why);
  ASSERT_TRUE(tcp::SendAll(fd, frame.data(), frame.size(), Soon(), "frame").ok());
}

// The next thing on `fd` is an ABORT frame saying `why`.
void ExpectAbortReason(int fd, const std::string& why) {
  Result<std::string> got = NextAbortReason(fd);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value(), why);
}

// Rank 1's answer to rank 0's Hello on `fd`: accepted, or "crossed".
void AnswerAsRankOne(int fd, bool crossed) {
  tcp::Reply r;
  r.accept = !crossed;
  r.crossed = crossed;
  r.comm_id = 5;
  r.acceptor = 1;
  r.connector = 0;
  r.world_size = 2;
  r.nsockets = 2;
  uint8_t reply[tcp::kReplySize];
  tcp::EncodeReply(r, reply);
  ASSERT_TRUE(tcp::SendAll(fd, reply, sizeof(reply), Soon(), "reply").ok());
}

TcpOptions TwoSocketsNoTimeouts() {
  TcpOptions o;
  o.connect = ConnectMode::kLazy;
  o.nsockets = 2;
  o.connect_timeout_ms = 60 * 60 * 1000;
  o.peer_timeout_ms = 60 * 60 * 1000;
  return o;
}

// Rank `rank` of two (lazy, two sockets per pair); the other rank is the test, whose
// address is a socket listening in *other that only the test accepts from.
std::unique_ptr<TcpTransport> OneOfTwo(int rank, UniqueFd* other) {
  std::string address;
  Result<UniqueFd> l = tcp::ListenTcp("127.0.0.1", 64, 0, &address);
  auto t = TcpTransport::Listen(rank, 2, 5, TwoSocketsNoTimeouts());
  if (!l.ok() || !t.ok()) return nullptr;
  *other = std::move(l.value());
  std::vector<PeerAddress> peers = {{address, "host0", 1}, {address, "host1", 1}};
  peers[rank].address = t.value()->address();
  Status st = t.value()->Connect(peers, Soon());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? std::move(t.value()) : nullptr;
}

// A rank that aborts while its dial is half made tells the sockets the peer already
// accepted why: a peer that counts the pair connected gets the reason, not a lost
// connection. Rank 1 here is the test: it accepts socket 0 and leaves socket 1 waiting.
TEST(TcpLazy, AnAbortMidDialSaysWhyOnTheSocketsMade) {
  UniqueFd listening1;
  std::unique_ptr<TcpTransport> t = OneOfTwo(0, &listening1);
  ASSERT_TRUE(t);
  int x = 1;
  RequestPtr s = t->Send(1, 1, &x, sizeof(x));
  UniqueFd sock[2];
  for (int i = 0; i < 2; ++i) {
    Result<UniqueFd> fd = tcp::AcceptTcp(listening1.get(), Soon());
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    sock[i] = std::move(fd.value());
    uint8_t hello[tcp::kHelloSize];
    ASSERT_TRUE(tcp::RecvAll(sock[i].get(), hello, sizeof(hello), Soon(), "hello").ok());
    ASSERT_TRUE(tcp::DecodeHello(hello).ok());
    if (i == 0) AnswerAsRankOne(sock[i].get(), /*crossed=*/false);
  }
  t->Abort(AbortedError("the test gave up"));
  EXPECT_NE(s->Wait(Soon()).message().find("the test gave up"), std::string::npos) << s->status().message();
  for (auto& fd : sock) ExpectAbortReason(fd.get(), "the test gave up");
}

// A rank that aborts while a peer's dial is half accepted tells the sockets it took
// why: the peer may have finished its half of the last one already.
TEST(TcpLazy, AnAbortMidAcceptSaysWhyOnTheSocketsTaken) {
  UniqueFd listening0;
  std::unique_ptr<TcpTransport> t = OneOfTwo(1, &listening0);
  ASSERT_TRUE(t);
  Result<UniqueFd> fd = SocketZeroAccepted(t->address());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  t->Abort(AbortedError("rank 1 gave up"));
  ExpectAbortReason(fd.value().get(), "rank 1 gave up");
}

// Crossing dials: rank 1 dials rank 0 (the test, which never answers) and answers rank
// 0's dial "crossed", keeping that socket for the pair's sake. Aborting, rank 1 says why
// on it too: rank 0, waiting for rank 1's dial, would otherwise see a bare close.
TEST(TcpLazy, AnAbortSaysWhyOnACrossedSocket) {
  UniqueFd listening0;
  std::unique_ptr<TcpTransport> t = OneOfTwo(1, &listening0);
  ASSERT_TRUE(t);
  int x = 1;
  RequestPtr s = t->Send(0, 1, &x, sizeof(x));
  // Rank 1's dial reached rank 0's listener: from now on it counts as dialing.
  Result<UniqueFd> taken = tcp::AcceptTcp(listening0.get(), Soon());
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  UniqueFd fd;
  Result<tcp::Reply> r = HelloFromRankZero(t->address(), &fd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->crossed);
  t->Abort(AbortedError("rank 1 gave up"));
  EXPECT_NE(s->Wait(Soon()).message().find("rank 1 gave up"), std::string::npos) << s->status().message();
  ExpectAbortReason(fd.get(), "rank 1 gave up");
}

// And the other end: rank 0 dials rank 1 (the test), which answers "crossed", then
// aborts and says why on that socket. Rank 0, waiting for rank 1's dial, fails with the
// reason, as an ABORT frame on a connected pair would make it.
TEST(TcpLazy, ACrossedPeerThatAbortsDoomsTheRankWaitingForIt) {
  UniqueFd listening1;
  std::unique_ptr<TcpTransport> t = OneOfTwo(0, &listening1);
  ASSERT_TRUE(t);
  int x = 1;
  RequestPtr s = t->Send(1, 1, &x, sizeof(x));
  Result<UniqueFd> fd = tcp::AcceptTcp(listening1.get(), Soon());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  uint8_t hello[tcp::kHelloSize];
  ASSERT_TRUE(tcp::RecvAll(fd.value().get(), hello, sizeof(hello), Soon(), "hello").ok());
  AnswerAsRankOne(fd.value().get(), /*crossed=*/true);
  for (auto until = Clock::now() + ::chorus::testing::Scaled(std::chrono::seconds(20));
       t->crossed_dials() == 0 && Clock::now() < until;) {
    std::this_thread::yield();
  }
  ASSERT_EQ(t->crossed_dials(), 1);
  SendAbortFrame(fd.value().get(), "rank 1 gave up");
  fd.value().reset();
  Status st = s->Wait(Soon());
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 (host host1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("aborted: rank 1 gave up"), std::string::npos) << st.message();
}

// The other way round: rank 0 (the test) dials, has socket 0 accepted, and aborts. The
// rank it dialed learns the reason from that socket: its communicator fails with it, as
// an ABORT frame on a connected pair would make it.
TEST(TcpLazy, APeerThatAbortsMidDialDoomsTheRankItDialed) {
  UniqueFd listening0;
  std::unique_ptr<TcpTransport> t = OneOfTwo(1, &listening0);
  ASSERT_TRUE(t);
  Result<UniqueFd> fd = SocketZeroAccepted(t->address());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  // Rank 0 aborts: it says why on the socket made, then closes it.
  SendAbortFrame(fd.value().get(), "rank 0 gave up");
  fd.value().reset();
  // The acceptor looks at its waiting links every 100 ms.
  Status health;
  for (auto until = Clock::now() + ::chorus::testing::Scaled(std::chrono::seconds(20));
       (health = t->health()).ok() && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(health.code(), StatusCode::kPeerFailed) << health.ToString();
  EXPECT_NE(health.message().find("rank 0 (host host0"), std::string::npos) << health.message();
  EXPECT_NE(health.message().find("aborted: rank 0 gave up"), std::string::npos) << health.message();
  // Its later posts fail with that reason at once, whichever peer they are for.
  int x = 0;
  Status st = t->Recv(0, 1, &x, sizeof(x))->Wait(Soon());
  EXPECT_NE(st.message().find("rank 0 gave up"), std::string::npos) << st.message();
}

// With RLIMIT_NOFILE too low for one more peer's sockets, the request that needed it
// fails naming the peer and the limit. In a child process: the hard limit cannot be
// raised back.
TEST(TcpLazy, ADescriptorLimitTooLowForOneMorePeerIsNamed) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string msg = "no error";
    {
      auto t = LazyWorld(2, {}, 9);
      if (t.size() == 2) {
        // Room for what is open and the spare, not for a peer's four sockets.
        const rlim_t lim = static_cast<rlim_t>(OpenFdCount() + 64 + 2);
        const rlimit r{lim, lim};
        if (::setrlimit(RLIMIT_NOFILE, &r) != 0) msg = "setrlimit failed";
        int x = 0;
        Status st = t[0]->Send(1, 1, &x, sizeof(x))->Wait(Soon());
        if (!st.ok()) msg = st.message();
      }
    }
    (void)!::write(pipe_fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RLIMIT_NOFILE"), std::string::npos) << msg;
}

}  // namespace
}  // namespace chorus::transport
