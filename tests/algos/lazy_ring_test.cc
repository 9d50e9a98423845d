// CHORUS_TCP_CONNECT=lazy under a real algorithm: 16 ranks on loopback run the ring
// all-reduce; each ends connected to its two ring neighbours only, with the right sum.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "algos/collectives.h"
#include "algos/fingerprint.h"
#include "tests/algos/tcp_world.h"

namespace chorus::testing {
namespace {

TEST(LazyRing, SixteenRanksConnectOnlyToTheirRingNeighbours) {
  constexpr int kN = 16;
  constexpr size_t kCount = 4099;  // uneven slices
  transport::TcpOptions o;
  o.connect = transport::ConnectMode::kLazy;
  o.nsockets = 1;
  o.socket_bufsize = 256 << 10;
  o.connect_timeout_ms = 20000 * kSlowdown;
  auto world = TcpWorld::Create(kN, size_t{4} << 20, o);
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  auto tcp = [&](int r) { return dynamic_cast<transport::TcpTransport*>(&world.value()->transport(r)); };
  for (int r = 0; r < kN; ++r) {
    ASSERT_NE(tcp(r), nullptr);
    EXPECT_EQ(tcp(r)->connected_peers(), 0);
  }
  std::vector<std::vector<int32_t>> out(kN, std::vector<int32_t>(kCount));
  const uint64_t fp = algos::Fingerprint(algos::Collective::kAllReduce, kCount, DataType::kInt32, ReduceOp::kSum, 0);
  for (int round = 0; round < 2; ++round) {
    std::vector<Status> st =
        world.value()->Run([&](int) { return fp; },
                           [&](int r, const algos::Context& ctx) {
                             std::vector<int32_t> in(kCount);
                             for (size_t i = 0; i < kCount; ++i)
                               in[i] = static_cast<int32_t>(r * 1000 + static_cast<int>(i % 997) + round);
                             return algos::AllReduceRing(ctx, in.data(), out[r].data(), kCount, DataType::kInt32,
                                                         ReduceOp::kSum, algos::Tuning());
                           });
    for (int r = 0; r < kN; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
    for (int r = 0; r < kN; ++r) {
      for (size_t i = 0; i < kCount; ++i) {
        const int32_t want = 1000 * (kN * (kN - 1) / 2) + kN * (static_cast<int32_t>(i % 997) + round);
        ASSERT_EQ(out[r][i], want) << "rank " << r << " element " << i << " round " << round;
      }
    }
  }
  for (int r = 0; r < kN; ++r) EXPECT_EQ(tcp(r)->connected_peers(), 2) << "rank " << r;
}

}  // namespace
}  // namespace chorus::testing
