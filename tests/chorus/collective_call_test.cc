// StagingWindows: how a call is split into windows (CHORUS_STAGING_WINDOW).
#include "chorus/collective_call.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus::internal {
namespace {

using algos::Collective;

CollectiveCall Call(Collective kind, size_t count, DataType dtype, const void* send, void* recv) {
  CollectiveCall c;
  c.kind = kind;
  c.count = count;
  c.dtype = dtype;
  c.send = send;
  c.recv = recv;
  return c;
}

TEST(StagingWindows, ElementwiseCallsSplitIntoWholeElementsWithTheirBuffersAdvanced) {
  std::vector<float> in(10), out(10);
  const CollectiveCall c = Call(Collective::kAllReduce, 10, DataType::kFloat32, in.data(), out.data());
  const std::vector<CollectiveCall> w = StagingWindows(c, 17);  // 4 floats and a byte: 4 per window
  ASSERT_EQ(w.size(), 3u);
  const size_t counts[] = {4, 4, 2};
  for (size_t k = 0; k < w.size(); ++k) {
    EXPECT_EQ(w[k].count, counts[k]);
    EXPECT_EQ(w[k].send, in.data() + 4 * k);
    EXPECT_EQ(w[k].recv, out.data() + 4 * k);
    EXPECT_EQ(w[k].kind, Collective::kAllReduce);
    EXPECT_EQ(w[k].dtype, DataType::kFloat32);
  }
}

TEST(StagingWindows, AWindowSmallerThanAnElementHoldsOne) {
  std::vector<double> buf(3);
  const CollectiveCall c = Call(Collective::kBroadcast, 3, DataType::kFloat64, buf.data(), buf.data());
  const std::vector<CollectiveCall> w = StagingWindows(c, 5);
  ASSERT_EQ(w.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(w[k].count, 1u);
    EXPECT_EQ(w[k].send, buf.data() + k);
    EXPECT_EQ(w[k].recv, buf.data() + k);
  }
}

TEST(StagingWindows, AnUnusedBufferStaysNull) {
  std::vector<int32_t> in(9);
  CollectiveCall c = Call(Collective::kReduce, 9, DataType::kInt32, in.data(), nullptr);  // a reduce off the root
  c.root = 1;
  const std::vector<CollectiveCall> w = StagingWindows(c, 16);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[2].count, 1u);
  for (const CollectiveCall& x : w) {
    EXPECT_EQ(x.recv, nullptr);
    EXPECT_EQ(x.root, 1);
  }
}

TEST(StagingWindows, OtherCallsStayWhole) {
  std::vector<float> in(1000), out(3000);
  const CollectiveCall small = Call(Collective::kAllReduce, 1000, DataType::kFloat32, in.data(), out.data());
  EXPECT_EQ(StagingWindows(small, 4000).size(), 1u);  // exactly one window
  EXPECT_EQ(StagingWindows(small, 0).size(), 1u);     // no windows
  for (Collective k : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll, Collective::kGather,
                       Collective::kScatter}) {
    const std::vector<CollectiveCall> w =
        StagingWindows(Call(k, 1000, DataType::kFloat32, in.data(), out.data()), 4096);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].count, 1000u);
    EXPECT_EQ(w[0].send, in.data());
  }
}

}  // namespace
}  // namespace chorus::internal
