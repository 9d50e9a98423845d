// The task side of CHORUS_STAGING_SYNC=signals (chorus/signalled_staging.h) without a
// GPU: two threads stand in for the streams (tests/algos/fake_streams.h). Every
// collective through it on real transports: streamed_collectives_test's Signalled
// cases; on a GPU: device_api_test's *Signal* tests.
#include "chorus/signalled_staging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tests/algos/fake_streams.h"

namespace chorus::internal {
namespace {

using testing::FakeStreams;

constexpr size_t kMax = 64;  // segments per direction

struct Board {
  std::vector<uint32_t> mem = std::vector<uint32_t>(SignalView::FlagsFor(kMax), 0);
  SignalView view{mem.data(), kMax};
};

// out[i] = in[i] + 1, segment by segment as the input arrives; the output segments
// reported final last to first (the order must not matter). Fails after `fail_after`
// segments where that is set.
HostRun PlusOne(size_t bytes, size_t segment, size_t fail_after = SIZE_MAX) {
  return [=](const void* send, void* recv, algos::StreamStaging* staging) -> Status {
    const auto* in = static_cast<const unsigned char*>(send);
    auto* out = static_cast<unsigned char*>(recv);
    size_t done = 0;
    for (size_t off = 0; off < bytes; off += segment, ++done) {
      if (done == fail_after) return InternalError("the algorithm failed on purpose");
      const size_t n = std::min(segment, bytes - off);
      if (staging) CHORUS_RETURN_IF_ERROR(staging->WaitInput(off, n));
      for (size_t i = off; i < off + n; ++i) out[i] = static_cast<unsigned char>(in[i] + 1);
    }
    if (staging) {
      for (size_t off = (bytes - 1) / segment * segment;; off -= segment) {
        staging->OutputFinal(off, std::min(segment, bytes - off));
        if (off == 0) break;
      }
    }
    return Status::Ok();
  };
}

std::vector<char> Pattern(size_t n, int salt) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 13 + salt);
  return v;
}

void ExpectPlusOne(const std::vector<char>& in, const std::vector<char>& out) {
  ASSERT_EQ(in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(static_cast<unsigned char>(out[i]), static_cast<unsigned char>(in[i] + 1)) << i;
}

TEST(SignalledStaging, StreamedWindowsReadTheirInputAndTheirResultsReachTheDevice) {
  for (bool streamed : {true, false}) {
    Board b;
    const size_t bytes = 10000, seg = 1000;
    std::vector<char> dev_in = Pattern(bytes, 3), dev_out(bytes, 0), host_in(bytes), host_out(bytes);
    DeviceIo io{dev_in.data(), bytes, dev_out.data(), bytes, streamed};
    const SignalledWindow w = PlanWindow(io, 1, seg, kMax);
    ASSERT_EQ(w.in_segments, 10u);
    FakeStreams streams(b.view, w, 0, io, host_in.data(), host_out.data());
    Status st = RunSignalledWindow(b.view, w, io, PlusOne(bytes, seg), host_in.data(), host_out.data(),
                                   Deadline::AfterMs(5000));
    streams.Join();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectPlusOne(dev_in, dev_out);
    EXPECT_EQ(b.view.Load(SignalView::kLanded), 1u);
  }
}

// Two windows through the same bounce buffers: the second's input reaches the host only
// after the first's results left it (LANDED), so neither is overwritten early.
TEST(SignalledStaging, ChainedWindowsShareTheStandIns) {
  Board b;
  const size_t bytes = 4096, seg = 1024;
  std::vector<char> in1 = Pattern(bytes, 1), in2 = Pattern(bytes, 2), out1(bytes), out2(bytes);
  std::vector<char> host_in(bytes), host_out(bytes);
  DeviceIo io1{in1.data(), bytes, out1.data(), bytes, true}, io2{in2.data(), bytes, out2.data(), bytes, true};
  const SignalledWindow w1 = PlanWindow(io1, 1, seg, kMax), w2 = PlanWindow(io2, NextSeq(1), seg, kMax);
  FakeStreams s1(b.view, w1, 0, io1, host_in.data(), host_out.data());
  FakeStreams s2(b.view, w2, w1.seq, io2, host_in.data(), host_out.data());
  ASSERT_TRUE(
      RunSignalledWindow(b.view, w1, io1, PlusOne(bytes, seg), host_in.data(), host_out.data(), Deadline::AfterMs(5000))
          .ok());
  ASSERT_TRUE(
      RunSignalledWindow(b.view, w2, io2, PlusOne(bytes, seg), host_in.data(), host_out.data(), Deadline::AfterMs(5000))
          .ok());
  s1.Join();
  s2.Join();
  ExpectPlusOne(in1, out1);
  ExpectPlusOne(in2, out2);
  EXPECT_EQ(b.view.Load(SignalView::kLanded), w2.seq);
}

// A failed algorithm and an input that never comes both end the window with an error,
// and both let the caller's stream go on (every OUT flag set, LANDED reached).
TEST(SignalledStaging, FailuresStillReleaseTheCallersStream) {
  for (bool input_arrives : {true, false}) {
    Board b;
    const size_t bytes = 5000, seg = 1000;
    std::vector<char> dev_in = Pattern(bytes, 7), dev_out(bytes), host_in(bytes), host_out(bytes);
    DeviceIo io{dev_in.data(), bytes, dev_out.data(), bytes, true};
    const SignalledWindow w = PlanWindow(io, 5, seg, kMax);
    FakeStreams streams(b.view, w, 0, io, host_in.data(), host_out.data(), input_arrives);
    Status st = RunSignalledWindow(b.view, w, io, PlusOne(bytes, seg, /*fail_after=*/2), host_in.data(),
                                   host_out.data(), Deadline::AfterMs(input_arrives ? 5000 : 300));
    streams.Join();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(input_arrives ? "failed on purpose" : "input's copy to the host"), std::string::npos)
        << st.ToString();
    EXPECT_EQ(b.view.Load(SignalView::kLanded), 5u) << "the caller's stream did not get through";
  }
}

// A window without outputs (a send): nothing for the caller's stream to copy back, yet
// it waits for the task to be done with the bounce buffers (DONE) before the next window's
// input may overwrite them.
TEST(SignalledStaging, AWindowWithoutOutputsEndsOnlyWhenItsTaskIsDone) {
  Board b;
  const size_t bytes = 3000;
  std::vector<char> dev_in = Pattern(bytes, 5), host_in(bytes), host_out;
  DeviceIo io{dev_in.data(), bytes, nullptr, 0, false};
  const SignalledWindow w = PlanWindow(io, 3, 1000, kMax);
  ASSERT_EQ(w.out_segments, 0u);
  std::atomic<bool> sent{false}, early{false};
  FakeStreams streams(b.view, w, 0, io, host_in.data(), host_out.data(), true, [&] { early = !sent.load(); });
  HostRun send = [&](const void* in, void*, algos::StreamStaging*) -> Status {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the send still reads the bounce buffer
    sent = std::memcmp(in, dev_in.data(), bytes) == 0;
    return Status::Ok();
  };
  ASSERT_TRUE(RunSignalledWindow(b.view, w, io, send, host_in.data(), host_out.data(), Deadline::AfterMs(5000)).ok());
  streams.Join();
  EXPECT_TRUE(sent.load());
  EXPECT_FALSE(early.load()) << "the caller's stream went on before the task was done with the bounce buffers";
  EXPECT_EQ(b.view.Load(SignalView::kLanded), 3u);
}

// The input copied in the order the algorithm reads it (here last segment first), while
// the algorithm reads it first to last: each wait is for its own segment's copy.
TEST(SignalledStaging, InputCopiedInTheAlgorithmsOrder) {
  Board b;
  const size_t bytes = 8000, seg = 1000;
  std::vector<char> dev_in = Pattern(bytes, 9), dev_out(bytes, 0), host_in(bytes), host_out(bytes);
  DeviceIo io{dev_in.data(), bytes, dev_out.data(), bytes, true};
  for (size_t off = bytes; off > 0; off -= seg) io.input_order.emplace_back(off - seg, seg);
  const SignalledWindow w = PlanWindow(io, 2, seg, kMax);
  EXPECT_EQ(w.in_order, (std::vector<size_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  FakeStreams streams(
      b.view, w, 0, io, host_in.data(), host_out.data(), true, [] {}, std::chrono::microseconds(2000));
  Status st =
      RunSignalledWindow(b.view, w, io, PlusOne(bytes, seg), host_in.data(), host_out.data(), Deadline::AfterMs(5000));
  streams.Join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectPlusOne(dev_in, dev_out);
}

TEST(SignalledStaging, SegmentsGrowPastTheirLimitAndSeqSkipsZero) {
  DeviceIo io{nullptr, 100 << 20, nullptr, 3000, false};
  SignalledWindow w = PlanWindow(io, 9, 2 << 20, 16);
  EXPECT_EQ(w.segment, (100u << 20) / 16 + ((100u << 20) % 16 != 0));
  EXPECT_EQ(w.in_segments, 16u);
  EXPECT_EQ(w.out_segments, 1u);
  w = PlanWindow(io, 9, 2 << 20, 1000);
  EXPECT_EQ(w.segment, 2u << 20);
  EXPECT_EQ(w.in_segments, 50u);
  EXPECT_EQ(NextSeq(7), 8u);
  EXPECT_EQ(NextSeq(UINT32_MAX), 1u);
}

}  // namespace
}  // namespace chorus::internal
