// A rank killed in the middle of a collective: every other rank's call fails with an
// error naming it, on whatever transport CHORUS_TRANSPORT picks (TCP here; the RDMA
// channel runs this binary inside the Soft-RoCE guest with CHORUS_TRANSPORT=rdma).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

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

}  // namespace
}  // namespace chorus
