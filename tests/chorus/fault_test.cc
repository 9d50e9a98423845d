// A rank killed in the middle of a collective: every other rank's call fails with an
// error naming it, on whatever transport CHORUS_TRANSPORT picks (TCP here; the RDMA
// channel runs this binary inside the Soft-RoCE guest with CHORUS_TRANSPORT=rdma).
// Then TCP liveness on both engines: a stopped peer that a rank waits on fails within
// CHORUS_PEER_TIMEOUT; a stopped or computing one fails nobody otherwise.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"
#include "tests/util/slowdown.h"

namespace chorus {
namespace {

using testing::RunRanks;

// With the TCP channels of the configuration (one on a 2-core machine), and with three:
// the lost rank's parts of each message are on two channels besides channel 0.
class Fault : public ::testing::TestWithParam<int> {};

TEST_P(Fault, RankKilledMidAllReduceFailsEveryOtherRankNamingIt) {
  // A deadline far beyond the failure detection: the error must come from it.
  Options o = testing::FileInitOptions(/*timeout_ms=*/60000, /*connect_timeout_ms=*/30000);
  if (GetParam() > 0) {
    Config c = o.config.value_or(Config::Process());
    c.tcp_lanes = GetParam();
    o.config = c;
  }
  const auto start = std::chrono::steady_clock::now();
  auto exits = RunRanks(
      3,
      [&](int rank) {
        auto comm = Communicator::Create(o);
        RANK_OK(comm.status());
        Communicator& c = **comm;
        // One call that completes, so every connection is in use, then one that cannot.
        std::vector<float> small(1024, 1.0f);
        RANK_OK(c.AllReduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum));
        // Rank 2 dies 50 ms into a run of large all-reduces. One 64 MiB call can finish
        // in 50 ms on a fast machine (rank 2 may have sent all the others need from it),
        // so the others keep calling until a call fails: at most kCalls, far more than
        // can complete in 50 ms.
        constexpr int kCalls = 40;
        std::vector<float> big(16 << 20, 1.0f);
        if (rank == 2) {
          std::vector<Work> works;
          for (int i = 0; i < kCalls; ++i) {
            works.push_back(c.IAllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum));
          }
          usleep(50 * 1000);
          kill(getpid(), SIGKILL);
        }
        Status st;
        for (int i = 0; i < kCalls && st.ok(); ++i) {
          st = c.AllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
        }
        RANK_CHECK(!st.ok(), "all_reduce succeeded " + std::to_string(kCalls) + " times without rank 2");
        RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
        // Whoever learns first aborts and tells the others why (on TCP an ABORT frame is
        // read even when the connection that carried it was reset right after).
        RANK_CHECK(st.message().find("rank 2") != std::string::npos, st.message());
        return 0;
      },
      {.timeout_seconds = 90});
  EXPECT_EQ(exits[2].signal, SIGKILL) << exits[2].Describe();
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].Describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

INSTANTIATE_TEST_SUITE_P(TcpChannels, Fault, ::testing::Values(0, 3), [](const ::testing::TestParamInfo<int>& i) {
  return i.param == 0 ? std::string("Configured") : "Channels" + std::to_string(i.param);
});

// TCP liveness (docs/design/tcp_liveness.md) with a short CHORUS_PEER_TIMEOUT.
constexpr auto kPeerTimeout = std::chrono::seconds(2);

class Liveness : public ::testing::TestWithParam<TcpEngine> {
 protected:
  static Options TcpOptions() {
    // A request deadline far beyond the peer timeout: a failure must come from the latter.
    Options o = testing::FileInitOptions(/*timeout_ms=*/120000, /*connect_timeout_ms=*/30000);
    Config c = o.config.value_or(Config::Process());
    c.transport = TransportMode::kTcp;
    c.tcp_engine = GetParam();
    c.peer_timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(kPeerTimeout).count();
    o.config = c;
    return o;
  }
};

// Both ranks' all_reduce of ones: every element is 2.
int AllReduceOnes(Communicator& c) {
  std::vector<float> v(4096, 1.0f);
  RANK_OK(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
  for (float x : v) RANK_CHECK(x == 2.0f, "all_reduce gave " + std::to_string(x) + ", not 2");
  return 0;
}

TEST_P(Liveness, StoppedPeerFailsTheRankWaitingOnItNamingIt) {
  const Options o = TcpOptions();
  auto exits = RunRanks(
      2,
      [&](int rank) {
        auto comm = Communicator::Create(o);
        RANK_OK(comm.status());
        Communicator& c = **comm;
        int64_t pids[2] = {0, 0};
        const int64_t mine = getpid();
        RANK_OK(c.AllGather(&mine, pids, 1, DataType::kInt64));
        if (rank == 1) {
          kill(getpid(), SIGSTOP);  // a frozen process: rank 0 kills it
          return 1;
        }
        std::vector<float> v(1024, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        const Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
        const auto took = std::chrono::steady_clock::now() - start;
        kill(static_cast<pid_t>(pids[1]), SIGKILL);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
        RANK_CHECK(!st.ok(), "all_reduce succeeded with rank 1 stopped");
        RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
        for (const char* part : {"rank 1 (host", "sent nothing for", "CHORUS_PEER_TIMEOUT"}) {
          RANK_CHECK(st.message().find(part) != std::string::npos, "no '" + std::string(part) + "' in " + st.message());
        }
        RANK_CHECK(took >= kPeerTimeout, "failed after " + std::to_string(ms) + " ms: " + st.message());
        RANK_CHECK(took < kPeerTimeout + testing::Scaled(std::chrono::seconds(3)),
                   "failed only after " + std::to_string(ms) + " ms");
        return 0;
      },
      {.timeout_seconds = 60});
  EXPECT_EQ(exits[1].signal, SIGKILL) << exits[1].Describe();
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
}

// Whether process `pid` is stopped, waiting for it (bounded) to become so.
bool WaitStopped(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + testing::Scaled(std::chrono::seconds(10));
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // "pid (comm) state ..."
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST_P(Liveness, PeerStoppedBetweenCallsFailsNobody) {
  // Stopped longer than the peer timeout while neither rank waits (a debugger between
  // calls), then both call.
  const Options o = TcpOptions();
  auto exits = RunRanks(2,
                        [&](int rank) {
                          auto comm = Communicator::Create(o);
                          RANK_OK(comm.status());
                          Communicator& c = **comm;
                          int64_t pids[2] = {0, 0};
                          const int64_t mine = getpid();
                          RANK_OK(c.AllGather(&mine, pids, 1, DataType::kInt64));
                          if (rank == 1) kill(getpid(), SIGSTOP);  // rank 0 wakes it
                          if (rank == 0) {
                            const auto peer = static_cast<pid_t>(pids[1]);
                            RANK_CHECK(WaitStopped(peer), "rank 1 did not stop");
                            std::this_thread::sleep_for(2 * kPeerTimeout);
                            kill(peer, SIGCONT);
                          }
                          return AllReduceOnes(c);
                        },
                        {.timeout_seconds = 60});
  testing::ExpectAllOk(exits);
}

TEST_P(Liveness, RankStoppedWhileWaitingDoesNotBlameItsPeerWhenItResumes) {
  // Rank 1 waits on rank 0, is stopped longer than the peer timeout, and finds rank 0's
  // message unread when it resumes: its own absence is not rank 0's silence.
  const Options o = TcpOptions();
  auto exits = RunRanks(2,
                        [&](int rank) {
                          auto comm = Communicator::Create(o);
                          RANK_OK(comm.status());
                          Communicator& c = **comm;
                          int64_t pids[2] = {0, 0};
                          const int64_t mine = getpid();
                          RANK_OK(c.AllGather(&mine, pids, 1, DataType::kInt64));
                          int64_t value = rank == 0 ? 42 : 0;
                          if (rank == 1) {
                            RANK_OK(c.Recv(&value, 1, DataType::kInt64, 0));
                            RANK_CHECK(value == 42, "received " + std::to_string(value));
                            return 0;
                          }
                          const auto peer = static_cast<pid_t>(pids[1]);
                          std::this_thread::sleep_for(kPeerTimeout / 2);  // rank 1 waits in its Recv
                          kill(peer, SIGSTOP);
                          RANK_CHECK(WaitStopped(peer), "rank 1 did not stop");
                          RANK_OK(c.Send(&value, 1, DataType::kInt64, 1));
                          std::this_thread::sleep_for(2 * kPeerTimeout);
                          kill(peer, SIGCONT);
                          return 0;
                        },
                        {.timeout_seconds = 60});
  testing::ExpectAllOk(exits);
}

TEST_P(Liveness, PeerComputingWhileTheOtherWaitsAnswersPings) {
  // Rank 1 computes (its engine answers rank 0's PINGs) for longer than the peer timeout
  // while rank 0 waits in the all_reduce.
  const auto computing = kPeerTimeout * 5 / 2;
  const Options o = TcpOptions();
  auto exits = RunRanks(2,
                        [&](int rank) {
                          auto comm = Communicator::Create(o);
                          RANK_OK(comm.status());
                          Communicator& c = **comm;
                          if (AllReduceOnes(c) != 0) return 1;
                          if (rank == 1) std::this_thread::sleep_for(computing);
                          return AllReduceOnes(c);
                        },
                        {.timeout_seconds = 60});
  testing::ExpectAllOk(exits);
}

INSTANTIATE_TEST_SUITE_P(TcpEngines, Liveness, ::testing::Values(TcpEngine::kEpoll, TcpEngine::kUring),
                         [](const ::testing::TestParamInfo<TcpEngine>& i) {
                           return std::string(i.param == TcpEngine::kUring ? "Uring" : "Epoll");
                         });

}  // namespace
}  // namespace chorus
