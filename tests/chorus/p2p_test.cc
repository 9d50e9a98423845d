// Multi-process send/recv through the public API: real processes, real sockets,
// both TCP engines, every init method.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus {
namespace {

using testing::ExpectAllOk;
using testing::RankExit;
using testing::RunRanks;

uint8_t Pattern(int from, int to, size_t i) { return static_cast<uint8_t>(i * 131 + from * 17 + to * 7 + 1); }

Options FileInit(const std::string& engine) {
  Options o = testing::FileInitOptions(30000, 30000);
  o.config->tcp_engine = engine == "uring" ? TcpEngine::kUring : TcpEngine::kEpoll;
  if (engine == "epoll_lazy") {  // over TCP, connections made when first needed
    o.config->transport = TransportMode::kTcp;
    o.config->tcp_connect = TcpConnect::kLazy;
  }
  return o;
}

class P2PTest : public ::testing::TestWithParam<std::string> {};

// Every pair of ranks exchanges messages of awkward sizes in both directions.
int AllPairs(int rank, const Options& options) {
  auto comm = Communicator::Create(options);
  RANK_OK(comm.status());
  Communicator& c = **comm;
  const std::vector<size_t> sizes = {0, 1, 7, 4099, (1 << 20) + 3};
  for (int peer = 0; peer < c.size(); ++peer) {
    if (peer == rank) continue;
    for (size_t n : sizes) {
      std::vector<uint8_t> out(n), in(n, 0xEE);
      for (size_t i = 0; i < n; ++i) out[i] = Pattern(rank, peer, i);
      Work s = c.ISend(out.data(), n, peer, /*tag=*/static_cast<uint32_t>(n));
      Work r = c.IRecv(in.data(), n, peer, static_cast<uint32_t>(n));
      RANK_OK(s.Wait());
      RANK_OK(r.Wait());
      for (size_t i = 0; i < n; ++i) {
        RANK_CHECK(in[i] == Pattern(peer, rank, i),
                   "byte " + std::to_string(i) + " of " + std::to_string(n) + " from rank " + std::to_string(peer));
      }
    }
  }
  RANK_OK(c.Barrier());
  RANK_OK(c.Shutdown());
  return 0;
}

TEST_P(P2PTest, TwoRanksAllSizes) {
  Options o = FileInit(GetParam());
  ExpectAllOk(RunRanks(2, [&](int r) { return AllPairs(r, o); }));
}

TEST_P(P2PTest, ThreeRanksAllPairs) {
  Options o = FileInit(GetParam());
  ExpectAllOk(RunRanks(3, [&](int r) { return AllPairs(r, o); }));
}

TEST_P(P2PTest, FourRanksAllPairs) {
  Options o = FileInit(GetParam());
  ExpectAllOk(RunRanks(4, [&](int r) { return AllPairs(r, o); }));
}

TEST_P(P2PTest, SixtyFourMiB) {
  Options o = FileInit(GetParam());
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    const size_t n = 64u << 20;
    std::vector<uint8_t> buf(n);
    if (rank == 0) {
      for (size_t i = 0; i < n; ++i) buf[i] = Pattern(0, 1, i);
      RANK_OK((*comm)->Send(buf.data(), n, 1));
    } else {
      RANK_OK((*comm)->Recv(buf.data(), n, 0));
      for (size_t i = 0; i < n; ++i) RANK_CHECK(buf[i] == Pattern(0, 1, i), "byte " + std::to_string(i));
    }
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// 64 tags sent in order, received in reverse order: matching is by tag, not arrival.
TEST_P(P2PTest, ManyTagsInterleaved) {
  Options o = FileInit(GetParam());
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    const int kTags = 64;
    std::vector<std::vector<uint32_t>> bufs(kTags);
    std::vector<Work> works;
    for (int t = 0; t < kTags; ++t) {
      int tag = rank == 0 ? t : kTags - 1 - t;
      bufs[tag].assign(100 + tag * 37, 0);
      if (rank == 0) {
        for (size_t i = 0; i < bufs[tag].size(); ++i) bufs[tag][i] = tag * 100000 + i;
        works.push_back((*comm)->ISend(bufs[tag].data(), bufs[tag].size() * 4, 1, tag));
      } else {
        works.push_back((*comm)->IRecv(bufs[tag].data(), bufs[tag].size() * 4, 0, tag));
      }
    }
    for (Work& w : works) RANK_OK(w.Wait());
    if (rank == 1) {
      for (int tag = 0; tag < kTags; ++tag) {
        for (size_t i = 0; i < bufs[tag].size(); ++i) {
          RANK_CHECK(bufs[tag][i] == tag * 100000 + i, "tag " + std::to_string(tag));
        }
      }
    }
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

INSTANTIATE_TEST_SUITE_P(Engines, P2PTest, ::testing::Values("uring", "epoll", "epoll_lazy"),
                         [](const auto& info) { return info.param; });

// Sender and receiver disagree on the size: an error naming both, on the receiver.
TEST(P2PErrors, SizeMismatchIsReported) {
  Options o = FileInit("auto");
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    std::vector<uint8_t> buf(100);
    if (rank == 0) {
      RANK_OK((*comm)->Send(buf.data(), 100, 1));
    } else {
      Status st = (*comm)->Recv(buf.data(), 64, 0);
      RANK_CHECK(st.code() == StatusCode::kMismatch, st.ToString());
      RANK_CHECK(st.message().find("100") != std::string::npos, st.message());
      RANK_CHECK(st.message().find("64") != std::string::npos, st.message());
    }
    return 0;
  }));
}

TEST(P2PErrors, BadPeerAndNullBuffer) {
  Options o = FileInit("auto");
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Status st = (*comm)->Send("x", 1, 5);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument, st.ToString());
    RANK_CHECK(st.message().find("peer 5") != std::string::npos, st.message());
    st = (*comm)->Recv(nullptr, 10, 1 - rank);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument, st.ToString());
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// Rank 2 exits without a word while ranks 0 and 1 wait for it: both get an error
// naming rank 2, long before the (30 s) timeout. Over TCP and shared memory its exit
// is seen at once; over RDMA only as silence, hence a peer timeout below the deadline.
TEST(P2PErrors, RankExitingEarlyFailsItsPeers) {
  Options o = FileInit("auto");
  o.config->peer_timeout_ms = 5000;
  auto start = std::chrono::steady_clock::now();
  auto exits = RunRanks(3, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    if (rank == 2) _exit(7);  // dies: no shutdown, no goodbye
    std::vector<uint8_t> buf(1 << 20);
    Status st = (*comm)->Recv(buf.data(), buf.size(), 2);
    RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
    RANK_CHECK(st.message().find("rank 2") != std::string::npos, st.message());
    return 0;
  });
  EXPECT_EQ(exits[2].code, 7);
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].Describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25));
}

// A rank killed mid-transfer (over RDMA possibly seen only as silence: a peer timeout
// below the 30 s deadline, as above).
TEST(P2PErrors, RankKilledMidTransfer) {
  Options o = FileInit("auto");
  o.config->peer_timeout_ms = 5000;
  auto exits = RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    std::vector<uint8_t> buf(256u << 20);
    if (rank == 1) {
      Work w = (*comm)->IRecv(buf.data(), buf.size(), 0);
      usleep(20000);
      kill(getpid(), SIGKILL);
    }
    // Rank 1 dies while receiving; keep sending until that surfaces (bounded).
    Status st;
    for (int i = 0; i < 200 && st.ok(); ++i) st = (*comm)->Send(buf.data(), buf.size(), 1);
    RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
    RANK_CHECK(st.message().find("rank 1") != std::string::npos, st.message());
    return 0;
  });
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
  EXPECT_EQ(exits[1].signal, SIGKILL);
}

}  // namespace
}  // namespace chorus
