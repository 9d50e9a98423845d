// TCP channels (tcp_transport.h): a collective's large messages cut into a part per channel
// after the first, each channel its own engine and sockets; the channels the ranks agree on;
// how many a host gets by default.
#include <gtest/gtest.h>

#include <thread>

#include "tests/transport/mesh.h"
#include "transport/tag.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport {
namespace {

using testing::Check;
using testing::Fill;
using testing::MakeMesh;
using testing::MeshOptions;

Deadline Soon() { return Deadline::After(::chorus::testing::Scaled(std::chrono::seconds(20))); }
uint64_t CollectiveTag(uint32_t step) { return transport::CollectiveTag(5, step); }

// Sizes around the cuts (three channels: channel 0 below 256 KiB, then two parts on channels 1
// and 2, from the one each tag picks, a remainder in the last).
const size_t kSizes[] = {
    0, 1, (128 << 10) - 1, 128 << 10, (256 << 10) - 1, 256 << 10, (384 << 10) + 7, (1 << 20) + 5, (16 << 20) + 3};

// Every rank sends every size to every other rank at once (a ring step's pattern, in
// both directions), then again with the receives posted late (parts arrive early).
void ExchangeEverySize(std::vector<std::unique_ptr<TcpTransport>>& t, bool late_receives) {
  const int n = static_cast<int>(t.size());
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::vector<char>> outs, ins;
      std::vector<RequestPtr> reqs;
      std::vector<std::tuple<int, size_t, uint64_t>> expect;  // from, size, seed
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          outs.emplace_back(kSizes[i]);
          Fill(&outs.back(), static_cast<uint32_t>(r * 100 + p * 10 + i));
          reqs.push_back(t[r]->Send(p, CollectiveTag(i), outs.back().data(), kSizes[i]));
        }
      }
      if (late_receives) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          ins.emplace_back(kSizes[i], 0);
          reqs.push_back(t[r]->Recv(p, CollectiveTag(i), ins.back().data(), kSizes[i]));
          expect.emplace_back(p, kSizes[i], p * 100 + r * 10 + i);
        }
      }
      for (auto& q : reqs) {
        Status st = q->Wait(Soon());
        if (!st.ok() && errors[r].empty()) errors[r] = st.ToString();
      }
      for (size_t k = 0; k < ins.size() && errors[r].empty(); ++k) {
        if (!Check(ins[k], static_cast<uint32_t>(std::get<2>(expect[k])))) {
          errors[r] = "the " + std::to_string(std::get<1>(expect[k])) + " bytes from rank " +
                      std::to_string(std::get<0>(expect[k])) + " arrived wrong";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(TcpChannelsTest, MessagesCutAcrossChannelsArriveWhole) {
  for (const std::string engine : {"epoll", "uring"}) {
    for (int n : {2, 3}) {
      MeshOptions o;
      o.engine = engine;
      o.channels = 3;
      auto t = MakeMesh(n, o);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      for (auto& x : t.value()) {
        EXPECT_EQ(x->channels(), 3);
        EXPECT_NE(x->Describe().find("3 channels"), std::string::npos) << x->Describe();
      }
      ExchangeEverySize(t.value(), false);
      ExchangeEverySize(t.value(), true);
      EXPECT_GT(t.value()[1]->counters().early_messages, 0u) << "late receives: parts should have come early";
    }
  }
}

// The mesh has the fewest channels any rank asked for (each rank connects the same sockets).
TEST(TcpChannelsTest, RanksAgreeOnTheFewestChannelsAsked) {
  MeshOptions o;
  o.engine = "epoll";
  o.rank_channels = {4, 2, 3};
  auto t = MakeMesh(3, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(t.value()[r]->channels(), 2) << "rank " << r;
  ExchangeEverySize(t.value(), false);
}

// An abort reaches the peer's waits on every channel: a cut message's Recv fails naming it.
TEST(TcpChannelsTest, AnAbortFailsThePeersCutMessage) {
  MeshOptions o;
  o.engine = "epoll";
  o.channels = 3;
  auto t = MakeMesh(2, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<char> in(8 << 20);
  auto r = t.value()[1]->Recv(0, CollectiveTag(1), in.data(), in.size());
  t.value()[0]->Abort(AbortedError("test abort"));
  Status st = r->Wait(Soon());
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.ToString();
  EXPECT_NE(st.message().find("test abort"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("of a 8388608-byte message"), std::string::npos) << st.message();
}

TEST(TcpChannelsTest, AutoChannelsGiveEachRankAChannelPerCore) {
  EXPECT_EQ(AutoChannels(2, 2), 1);  // this CI machine, two ranks
  EXPECT_EQ(AutoChannels(2, 1), 2);
  EXPECT_EQ(AutoChannels(4, 3), 1);
  EXPECT_EQ(AutoChannels(16, 2), 8);  // the GPU machine, two ranks
  EXPECT_EQ(AutoChannels(16, 8), 2);
  EXPECT_EQ(AutoChannels(128, 1), kMaxChannels);
  EXPECT_EQ(AutoChannels(0, 0), 1);  // unknown
}

}  // namespace
}  // namespace chorus::transport
