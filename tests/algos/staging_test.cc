// The streamed-staging pipeline (chorus/staging_pipeline.h) on its own, without a GPU:
// its real logic over a host copy engine (host_copies.h). The collectives streamed
// through it: streamed_collectives_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "chorus/staging_pipeline.h"
#include "tests/algos/host_copies.h"

namespace chorus {
namespace {

using internal::StagingPipeline;
using testing::HostCopies;

TEST(StagingPipeline, InputIsOnTheHostOnceWaitedFor) {
  std::vector<char> device(10000), host(10000, 0);
  for (size_t i = 0; i < device.size(); ++i) device[i] = static_cast<char>(i * 7 + 1);
  HostCopies in(std::chrono::microseconds(300)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  ASSERT_TRUE(p.BeginInput(host.data(), device.data(), device.size(), /*start_now=*/true).ok());
  ASSERT_TRUE(p.WaitInput(2500, 100).ok());  // segments 0..2
  EXPECT_EQ(std::memcmp(host.data(), device.data(), 3000), 0);
  ASSERT_TRUE(p.WaitInput(9999, 1).ok());
  EXPECT_EQ(host, device);
  EXPECT_TRUE(p.Finish(true).ok());
}

// Which segment each started copy was, in order.
std::vector<size_t> SegmentsStarted(HostCopies& e, const std::vector<char>& host, size_t segment) {
  std::vector<size_t> segs;
  for (auto [dst, bytes] : e.started()) segs.push_back((static_cast<char*>(dst) - host.data()) / segment);
  return segs;
}

TEST(StagingPipeline, InputGoesToTheHostInTheOrderTheAlgorithmReadsIt) {
  std::vector<char> device(9500), host(9500, 0);
  for (size_t i = 0; i < device.size(); ++i) device[i] = static_cast<char>(i * 5 + 3);
  HostCopies in(std::chrono::microseconds(100)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  ASSERT_TRUE(p.BeginInput(host.data(), device.data(), device.size()).ok());
  EXPECT_TRUE(in.started().empty());  // nothing before the algorithm says what it reads first
  p.InputOrder({{7000, 2500}, {2500, 1000}, {0, 0}, {20000, 5}});  // empty and out-of-range ranges ignored
  EXPECT_EQ(SegmentsStarted(in, host, 1000), (std::vector<size_t>{7, 8, 9, 2, 3, 0, 1, 4, 5, 6}));
  p.InputOrder({{0, 100}});  // too late: the copies are under way
  EXPECT_EQ(in.started().size(), 10u);
  ASSERT_TRUE(p.WaitInput(9000, 500).ok());
  EXPECT_EQ(std::memcmp(host.data() + 7000, device.data() + 7000, 2500), 0);
  ASSERT_TRUE(p.WaitInput(0, 9500).ok());
  EXPECT_EQ(host, device);
  EXPECT_TRUE(p.Finish(true).ok());
}

TEST(StagingPipeline, WithoutAnOrderTheFirstRangeWaitedForGoesFirst) {
  std::vector<char> device(5000, 9), host(5000, 0);
  HostCopies in(std::chrono::microseconds(100)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  ASSERT_TRUE(p.BeginInput(host.data(), device.data(), device.size()).ok());
  ASSERT_TRUE(p.WaitInput(3500, 600).ok());
  EXPECT_EQ(SegmentsStarted(in, host, 1000), (std::vector<size_t>{3, 4, 0, 1, 2}));
  EXPECT_EQ(std::memcmp(host.data() + 3000, device.data() + 3000, 2000), 0);
  EXPECT_TRUE(p.Finish(true).ok());
  EXPECT_EQ(host, device);  // Finish waited for every copy
}

TEST(StagingPipeline, InputNeverReadIsNeverCopied) {
  std::vector<char> device(5000, 9), host(5000, 0);
  HostCopies in(std::chrono::microseconds(0)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  ASSERT_TRUE(p.BeginInput(host.data(), device.data(), device.size()).ok());
  EXPECT_TRUE(p.Finish(false).ok());  // e.g. the algorithm failed before reading
  EXPECT_TRUE(in.started().empty());
}

TEST(StagingPipeline, ASegmentGoesBackOnlyOnceAllOfItIsFinal) {
  std::vector<char> host(2500, 'r'), device(2500, '?');
  HostCopies in(std::chrono::microseconds(0)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  p.SetOutput(device.data(), host.data(), host.size());
  p.OutputFinal(0, 400);
  p.OutputFinal(600, 300);
  p.OutputFinal(300, 200);  // overlaps: [0,500) + [600,900), still a hole
  EXPECT_TRUE(out.started().empty());
  p.OutputFinal(450, 600);  // closes segment 0 and starts segment 1 ([1000,1050))
  ASSERT_EQ(out.started().size(), 1u);
  EXPECT_EQ(out.started()[0].first, device.data());
  EXPECT_EQ(out.started()[0].second, 1000u);
  p.OutputFinal(2000, 1000);  // the short last segment, clipped at the end
  ASSERT_EQ(out.started().size(), 2u);
  EXPECT_EQ(out.started()[1].first, device.data() + 2000);
  EXPECT_EQ(out.started()[1].second, 500u);
  ASSERT_TRUE(p.Finish(true).ok());  // segment 1 was never reported whole: copied at the end
  EXPECT_EQ(out.started().size(), 3u);
  EXPECT_EQ(device, host);
}

TEST(StagingPipeline, AFailedCopyIsTheAlgorithmsError) {
  std::vector<char> device(5000, 1), host(5000, 0);
  HostCopies in(std::chrono::microseconds(0), /*fail_at=*/2), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  Status st = p.BeginInput(host.data(), device.data(), device.size(), /*start_now=*/true);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("staging the input to the host"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("refused copy 2"), std::string::npos) << st.ToString();
  EXPECT_FALSE(p.WaitInput(0, 1).ok());
  EXPECT_FALSE(p.Finish(false).ok());  // and it waited for the two copies in flight
}

}  // namespace
}  // namespace chorus
