// TCP-only cases: the socket hand-shake and a peer process killed mid-stream (the
// transport contract itself is checked for every transport in transport_test.cc).
#include "transport/tcp/tcp_transport.h"
#include "transport/tag.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "tests/util/slowdown.h"

namespace chorus::transport {
namespace {

Deadline Soon() { return Deadline::After(::chorus::testing::Scaled(std::chrono::seconds(20))); }

// "uring", "epoll", or "epoll_lanes" (epoll, three channels, a collective's tag: the
// streamed message is cut in three parts).
class TcpTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  EngineKind Engine() const { return GetParam() == "uring" ? EngineKind::kUring : EngineKind::kEpoll; }
  int Channels() const { return GetParam() == "epoll_lanes" ? 3 : 1; }
  uint64_t Tag() const { return GetParam() == "epoll_lanes" ? CollectiveTag(0, 1) : 1; }
};

TEST_P(TcpTransportTest, WrongCommunicatorIdIsRefusedNamingBothIds) {
  TcpOptions o;
  o.engine = Engine();
  o.connect = ConnectMode::kEager;  // the mesh's set-up handshake: Connect itself refuses
  auto a = TcpTransport::Listen(0, 2, 0x1111, o);
  auto b = TcpTransport::Listen(1, 2, 0x2222, o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<PeerAddress> addrs = {{a.value()->address(), "h0"}, {b.value()->address(), "h1"}};
  Status sa, sb;
  Deadline d = Deadline::After(std::chrono::seconds(2));
  std::thread ta([&] { sa = a.value()->Connect(addrs, d); });
  sb = b.value()->Connect(addrs, d);
  ta.join();
  EXPECT_EQ(sb.code(), StatusCode::kMismatch) << sb.ToString();
  EXPECT_NE(sb.message().find("1111"), std::string::npos) << sb.message();
  EXPECT_NE(sb.message().find("2222"), std::string::npos) << sb.message();
  EXPECT_FALSE(sa.ok());
  EXPECT_NE(sa.message().find("rank 1"), std::string::npos) << sa.message();
}

TEST_P(TcpTransportTest, JobSecretOnOneSideIsRefusedSayingWhichOnBothSides) {
  TcpOptions with, without;
  with.engine = without.engine = Engine();
  with.connect = without.connect = ConnectMode::kEager;  // the mesh's set-up handshake: Connect itself refuses
  with.secret = JobSecret("open sesame");
  auto a = TcpTransport::Listen(0, 2, 9, with);
  auto b = TcpTransport::Listen(1, 2, 9, without);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<PeerAddress> addrs = {{a.value()->address(), "h0"}, {b.value()->address(), "h1"}};
  Status sa, sb;
  const auto start = Clock::now();
  Deadline d = Deadline::After(std::chrono::seconds(2));
  std::thread ta([&] { sa = a.value()->Connect(addrs, d); });
  sb = b.value()->Connect(addrs, d);
  ta.join();
  EXPECT_LT(Clock::now() - start, ::chorus::testing::Scaled(std::chrono::seconds(5)));
  EXPECT_EQ(sb.code(), StatusCode::kMismatch) << sb.ToString();
  EXPECT_NE(sb.message().find("rank 0 requires a job secret; rank 1 has none"), std::string::npos) << sb.message();
  ASSERT_FALSE(sa.ok());
  EXPECT_NE(sa.message().find("rank 0 requires a job secret; rank 1 has none"), std::string::npos) << sa.message();
}

TEST_P(TcpTransportTest, StrangersWithoutTheSecretAreDroppedAndTheRealPeerStillConnects) {
  TcpOptions o;
  o.engine = Engine();
  o.connect = ConnectMode::kEager;  // the mesh's set-up handshake: Connect drops strangers
  o.secret = JobSecret("open sesame");
  TcpOptions wrong = o, none = o;
  wrong.secret = JobSecret("open barley");
  none.secret = JobSecret();
  auto a = TcpTransport::Listen(0, 2, 5, o);
  auto b = TcpTransport::Listen(1, 2, 5, o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<PeerAddress> addrs = {{a.value()->address(), "h0", Channels()}, {b.value()->address(), "h1", Channels()}};
  Status sa;
  std::thread ta([&] { sa = a.value()->Connect(addrs, Soon()); });
  // Two processes claiming to be rank 1 before the real one: one with another secret,
  // one with none. Each fails at once; neither takes rank 1's slot.
  for (const TcpOptions* stranger : {&wrong, &none}) {
    auto s = TcpTransport::Listen(1, 2, 5, *stranger);
    ASSERT_TRUE(s.ok());
    Status ss = s.value()->Connect(addrs, Soon());
    EXPECT_EQ(ss.code(), StatusCode::kMismatch) << ss.ToString();
    EXPECT_NE(ss.message().find(stranger == &wrong ? "did not prove the job secret" : "requires a job secret"),
              std::string::npos)
        << ss.message();
  }
  Status sb = b.value()->Connect(addrs, Soon());
  ta.join();
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  int out = 42, in = 0;
  auto r = a.value()->Recv(1, Tag(), &in, sizeof(in));
  ASSERT_TRUE(b.value()->Send(0, Tag(), &out, sizeof(out))->Wait(Soon()).ok());
  ASSERT_TRUE(r->Wait(Soon()).ok());
  EXPECT_EQ(in, 42);
}

TEST_P(TcpTransportTest, KilledPeerProcessFailsTheRecvQuickly) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  TcpOptions o;
  o.engine = Engine();
  const uint64_t tag = Tag();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Rank 1: connect, then stream a large message forever (until killed).
    alarm(30);
    auto t = TcpTransport::Listen(1, 2, 7, o);
    if (!t.ok()) _exit(2);
    std::string mine = t.value()->address();
    char peer[128] = {0};
    if (write(to_parent[1], mine.c_str(), mine.size() + 1) < 0 || read(to_child[0], peer, sizeof(peer) - 1) <= 0)
      _exit(3);
    std::vector<PeerAddress> addrs = {{peer, "parent", Channels()}, {mine, "child", Channels()}};
    if (!t.value()->Connect(addrs, Deadline::After(std::chrono::seconds(10))).ok()) _exit(4);
    std::vector<char> big(256 << 20, 1);
    for (;;) {
      if (!t.value()->Send(0, tag, big.data(), big.size())->Wait(Deadline::After(std::chrono::seconds(30))).ok())
        _exit(5);
    }
  }
  auto t = TcpTransport::Listen(0, 2, 7, o);
  ASSERT_TRUE(t.ok());
  std::string mine = t.value()->address();
  char peer[128] = {0};
  ASSERT_GT(read(to_parent[0], peer, sizeof(peer) - 1), 0);
  ASSERT_GT(write(to_child[1], mine.c_str(), mine.size() + 1), 0);
  std::vector<PeerAddress> addrs = {{mine, "parent", Channels()}, {peer, "child", Channels()}};
  ASSERT_TRUE(t.value()->Connect(addrs, Soon()).ok());
  ASSERT_EQ(t.value()->channels(), Channels());
  std::vector<char> in(256 << 20);
  auto first = t.value()->Recv(1, tag, in.data(), in.size());
  ASSERT_TRUE(first->Wait(Soon()).ok());
  auto r = t.value()->Recv(1, tag, in.data(), in.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  auto start = Clock::now();
  Status st = r->Wait(Soon());
  waitpid(pid, nullptr, 0);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  if (st.ok()) GTEST_SKIP() << "the message completed before the kill landed";
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 (host child"), std::string::npos) << st.message();
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

INSTANTIATE_TEST_SUITE_P(Engines, TcpTransportTest, ::testing::Values("uring", "epoll", "epoll_lanes"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace chorus::transport
