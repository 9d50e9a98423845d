// RDMA-only cases: what "no verbs device" looks like, the HELLO check, credits under a
// flood of unexpected messages, refusals reaching the sender, and a peer process
// killed mid-stream. Skipped with the reason where no verbs device exists; the RDMA
// channel (tools/rdma_vm/run_tests.sh) runs them inside a Soft-RoCE guest.
#include "transport/rdma/rdma_transport.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "tests/transport/mesh.h"

namespace chorus::transport {
namespace {

using testing::Check;
using testing::Fill;

Deadline Soon() { return Deadline::After(std::chrono::seconds(30)); }

const std::string& Unavailable() {
  static const std::string why = testing::RdmaUnavailableReason();
  return why;
}

#define SKIP_WITHOUT_RDMA() \
  if (!Unavailable().empty()) GTEST_SKIP() << "RDMA: " << Unavailable()

TEST(RdmaTransportTest, OpenSaysClearlyWhyRdmaCannotBeUsedOrDescribesTheDevice) {
  auto t = RdmaTransport::Open(0, 1, 1, RdmaOptions());
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status().ToString();
    const std::string& m = t.status().message();
    EXPECT_TRUE(m.find("no verbs device") != std::string::npos || m.find("libibverbs") != std::string::npos) << m;
    return;
  }
  EXPECT_NE(t.value()->Describe().find("rdma "), std::string::npos) << t.value()->Describe();
  EXPECT_EQ(t.value()->address().rfind("rdma1 ", 0), 0u) << t.value()->address();
}

TEST(RdmaTransportTest, ANamedDeviceThatDoesNotExistIsNamedInTheError) {
  SKIP_WITHOUT_RDMA();
  RdmaOptions o;
  o.hca = "nosuchdev0:1";
  auto t = RdmaTransport::Open(0, 1, 1, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nosuchdev0"), std::string::npos) << t.status().ToString();
  o.hca = "";
  o.gid_index = 4000;
  t = RdmaTransport::Open(0, 1, 1, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("CHORUS_IB_GID_INDEX=4000"), std::string::npos) << t.status().ToString();
}

TEST(RdmaTransportTest, WrongCommunicatorIdFailsTheHelloNamingBothIds) {
  SKIP_WITHOUT_RDMA();
  auto a = RdmaTransport::Open(0, 2, 0x1111, RdmaOptions());
  auto b = RdmaTransport::Open(1, 2, 0x2222, RdmaOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> addrs = {a.value()->address(), b.value()->address()}, hosts = {"h0", "h1"};
  ASSERT_TRUE(a.value()->Connect(addrs, hosts).ok());
  ASSERT_TRUE(b.value()->Connect(addrs, hosts).ok());
  Status sa, sb;
  Deadline d = Deadline::After(std::chrono::seconds(10));
  std::thread ta([&] { sa = a.value()->Start(d); });
  sb = b.value()->Start(d);
  ta.join();
  ASSERT_FALSE(sa.ok());
  ASSERT_FALSE(sb.ok());
  const std::string both = sa.message() + " | " + sb.message();
  EXPECT_NE(both.find("1111"), std::string::npos) << both;
  EXPECT_NE(both.find("2222"), std::string::npos) << both;
}

TEST(RdmaTransportTest, AFloodOfUnexpectedSmallMessagesWaitsForCreditsAndArrivesInOrder) {
  SKIP_WITHOUT_RDMA();
  auto m = testing::MakeRdmaMesh(2, testing::MeshOptions());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto& t = m.value();
  constexpr int kMessages = 1000;  // far more than the receiver's 64 slots
  std::vector<std::vector<char>> out(kMessages), in(kMessages);
  std::vector<RequestPtr> sends, recvs;
  for (int i = 0; i < kMessages; ++i) {
    out[i].resize(1 + (i * 37) % 8000);
    Fill(&out[i], i);
    sends.push_back(t[0]->Send(1, 3, out[i].data(), out[i].size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < kMessages; ++i) {
    in[i].assign(out[i].size(), 0);
    recvs.push_back(t[1]->Recv(0, 3, in[i].data(), in[i].size()));
  }
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(recvs[i]->Wait(Soon()).ok()) << i << ": " << recvs[i]->status().ToString();
    ASSERT_TRUE(sends[i]->Wait(Soon()).ok()) << i;
    ASSERT_TRUE(Check(in[i], i)) << i;
  }
}

TEST(RdmaTransportTest, ALargeMessageOfTheWrongSizeIsRefusedOnBothSides) {
  SKIP_WITHOUT_RDMA();
  auto m = testing::MakeRdmaMesh(2, testing::MeshOptions());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto& t = m.value();
  std::vector<char> out(100000), in(99999);
  auto s = t[0]->Send(1, 3, out.data(), out.size());
  auto r = t[1]->Recv(0, 3, in.data(), in.size());
  Status rs = r->Wait(Soon()), ss = s->Wait(Soon());
  EXPECT_EQ(rs.code(), StatusCode::kMismatch) << rs.ToString();
  EXPECT_NE(rs.message().find("rank 1 posted a receive of 99999 bytes"), std::string::npos) << rs.message();
  EXPECT_EQ(ss.code(), StatusCode::kMismatch) << ss.ToString();
  EXPECT_NE(ss.message().find("refused by rank 1"), std::string::npos) << ss.message();
  // Both stay usable.
  Fill(&out, 4);
  in.assign(out.size(), 0);
  auto r2 = t[1]->Recv(0, 3, in.data(), out.size());
  auto s2 = t[0]->Send(1, 3, out.data(), out.size());
  ASSERT_TRUE(r2->Wait(Soon()).ok()) << r2->status().ToString();
  ASSERT_TRUE(s2->Wait(Soon()).ok());
  EXPECT_TRUE(Check(in, 4));
}

// Rank 1 runs in a child process that streams large messages until it is killed.
TEST(RdmaTransportTest, KilledPeerProcessFailsTheRecvNamingIt) {
  SKIP_WITHOUT_RDMA();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  auto exchange = [](int out_fd, int in_fd, const std::string& mine) {
    std::string len = std::to_string(mine.size()) + "\n";
    if (write(out_fd, len.data(), len.size()) < 0 || write(out_fd, mine.data(), mine.size()) < 0) return std::string();
    std::string got, n;
    char c;
    while (read(in_fd, &c, 1) == 1 && c != '\n') n += c;
    got.resize(static_cast<size_t>(std::atol(n.c_str())));
    size_t done = 0;
    while (done < got.size()) {
      ssize_t k = read(in_fd, &got[done], got.size() - done);
      if (k <= 0) return std::string();
      done += static_cast<size_t>(k);
    }
    return got;
  };
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);
    auto t = RdmaTransport::Open(1, 2, 7, RdmaOptions());
    if (!t.ok()) _exit(2);
    std::string peer = exchange(to_parent[1], to_child[0], t.value()->address());
    if (peer.empty()) _exit(3);
    if (!t.value()->Connect({peer, t.value()->address()}, {"parent", "child"}).ok()) _exit(4);
    if (exchange(to_parent[1], to_child[0], "connected") != "connected") _exit(3);
    if (!t.value()->Start(Deadline::After(std::chrono::seconds(20))).ok()) _exit(5);
    std::vector<char> big(1 << 20, 1);
    for (;;) {
      if (!t.value()->Send(0, 1, big.data(), big.size())->Wait(Deadline::After(std::chrono::seconds(30))).ok())
        _exit(6);
    }
  }
  auto t = RdmaTransport::Open(0, 2, 7, RdmaOptions());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string peer = exchange(to_child[1], to_parent[0], t.value()->address());
  ASSERT_FALSE(peer.empty());
  ASSERT_TRUE(t.value()->Connect({t.value()->address(), peer}, {"parent", "child"}).ok());
  ASSERT_EQ(exchange(to_child[1], to_parent[0], "connected"), "connected");
  ASSERT_TRUE(t.value()->Start(Soon()).ok());
  std::vector<char> in(1 << 20);
  ASSERT_TRUE(t.value()->Recv(1, 1, in.data(), in.size())->Wait(Soon()).ok());
  auto r1 = t.value()->Recv(1, 1, in.data(), in.size());
  auto r2 = t.value()->Recv(1, 1, in.data(), in.size());
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto start = Clock::now();
  Status st = r1->Wait(Soon());
  if (st.ok()) st = r2->Wait(Soon());  // the first may have landed before the kill
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 (host child)"), std::string::npos) << st.message();
  EXPECT_FALSE(t.value()->health().ok());
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

}  // namespace
}  // namespace chorus::transport
