// Streamed staging of device buffers (chorus/staging_pipeline.h) without a GPU: the
// pipeline runs its real logic over a host copy engine (a thread that copies in order,
// slowly enough that copies really are in flight while the algorithm runs), and the
// ring all-reduce runs on real TCP transports. The "device" buffers are host memory;
// everything between them and the algorithm is what a GPU run executes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algos/collectives.h"
#include "algos/fingerprint.h"
#include "algos/selector.h"
#include "chorus/staging_pipeline.h"
#include "tests/algos/tcp_world.h"

namespace chorus {
namespace {

using internal::CopyEngine;
using internal::StagingPipeline;

// Copies in order on its own thread, each after `delay`; Start can be told to fail.
class HostCopies final : public CopyEngine {
 public:
  explicit HostCopies(std::chrono::microseconds delay, int fail_at = -1)
      : delay_(delay), fail_at_(fail_at), worker_([this] { Loop(); }) {}
  ~HostCopies() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Result<uint64_t> Start(void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    if (static_cast<int>(started_) == fail_at_) return IoError("test copy engine refused copy " + std::to_string(fail_at_), 5);
    queue_.push_back({dst, src, bytes});
    started_log_.push_back({dst, bytes});
    cv_.notify_all();
    return started_++;
  }
  Status Wait(uint64_t ticket, Deadline deadline) override {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_until(l, deadline.at(), [&] { return done_ > ticket; })) return TimeoutError("test copy not done");
    return Status::Ok();
  }
  std::vector<std::pair<void*, size_t>> started() {
    std::lock_guard<std::mutex> l(mu_);
    return started_log_;
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Copy c = queue_.front();
      l.unlock();
      std::this_thread::sleep_for(delay_);
      std::memcpy(c.dst, c.src, c.bytes);
      l.lock();
      queue_.pop_front();
      ++done_;
      cv_.notify_all();
    }
  }

  const std::chrono::microseconds delay_;
  const int fail_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  std::vector<std::pair<void*, size_t>> started_log_;
  uint64_t started_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

TEST(StagingPipeline, InputIsOnTheHostOnceWaitedFor) {
  std::vector<char> device(10000), host(10000, 0);
  for (size_t i = 0; i < device.size(); ++i) device[i] = static_cast<char>(i * 7 + 1);
  HostCopies in(std::chrono::microseconds(300)), out(std::chrono::microseconds(0));
  StagingPipeline p(in, out, 1000, Deadline::AfterMs(10000));
  ASSERT_TRUE(p.BeginInput(host.data(), device.data(), device.size()).ok());
  ASSERT_TRUE(p.WaitInput(2500, 100).ok());  // segments 0..2
  EXPECT_EQ(std::memcmp(host.data(), device.data(), 3000), 0);
  ASSERT_TRUE(p.WaitInput(9999, 1).ok());
  EXPECT_EQ(host, device);
  EXPECT_TRUE(p.Finish(true).ok());
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
  Status st = p.BeginInput(host.data(), device.data(), device.size());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("staging the input to the host"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("refused copy 2"), std::string::npos) << st.ToString();
  EXPECT_FALSE(p.WaitInput(0, 1).ok());
  EXPECT_FALSE(p.Finish(false).ok());  // and it waited for the two copies in flight
}

// Checks the hook contract of a streaming algorithm: every input byte it reads was
// waited for (unwaited input is NaN), and every output byte is reported once.
class ContractCheck final : public algos::StreamStaging {
 public:
  explicit ContractCheck(size_t bytes) : reported_(bytes, 0) {}
  Status WaitInput(size_t, size_t) override { return Status::Ok(); }
  void OutputFinal(size_t offset, size_t bytes) override {
    for (size_t i = offset; i < offset + bytes && i < reported_.size(); ++i) ++reported_[i];
  }
  const std::vector<int>& reported() const { return reported_; }

 private:
  std::vector<int> reported_;
};

float Input(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1013)); }

struct Case {
  int n;
  size_t count;
  bool in_place;
};

class RingStreams : public ::testing::TestWithParam<Case> {};

// The ring all-reduce on streamed stand-ins: "device" buffers reach the algorithm only
// through the pipeline (stand-ins start as NaN), results leave only through it.
TEST_P(RingStreams, ResultsMatchAndEveryByteIsReportedOnce) {
  const Case c = GetParam();
  Result<std::unique_ptr<testing::TcpWorld>> w = testing::TcpWorld::Create(c.n);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const size_t bytes = c.count * sizeof(float);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> dev_in(c.n), dev_out(c.n), host_in(c.n), host_out(c.n);
  std::vector<std::unique_ptr<ContractCheck>> checks(c.n);
  for (int r = 0; r < c.n; ++r) {
    dev_in[r].resize(c.count);
    for (size_t i = 0; i < c.count; ++i) dev_in[r][i] = Input(r, i);
    dev_out[r].assign(c.count, -1.0f);
    host_in[r].assign(c.count, nan);
    host_out[r].assign(c.count, nan);
    checks[r] = std::make_unique<ContractCheck>(bytes);
  }
  algos::Tuning tuning;
  tuning.chunk_bytes = 16 << 10;  // many chunks per 64K segment and per block (windowed above 32 per block)
  const uint64_t fp = algos::Fingerprint(algos::Collective::kAllReduce, c.count, DataType::kFloat32, ReduceOp::kSum, 0);
  std::vector<Status> st = w.value()->Run(
      [&](int) { return fp; },
      [&](int r, const algos::Context& ctx) -> Status {
        HostCopies in(std::chrono::microseconds(200)), out(std::chrono::microseconds(200));
        StagingPipeline p(in, out, 64 << 10, ctx.deadline);
        float* hsend = c.in_place ? host_out[r].data() : host_in[r].data();
        CHORUS_RETURN_IF_ERROR(p.BeginInput(hsend, dev_in[r].data(), bytes));
        p.SetOutput(dev_out[r].data(), host_out[r].data(), bytes);
        // Both hooks: the pipeline's, and the contract check's on the side.
        struct Both final : algos::StreamStaging {
          algos::StreamStaging* a;
          algos::StreamStaging* b;
          Status WaitInput(size_t o, size_t n) override {
            CHORUS_RETURN_IF_ERROR(a->WaitInput(o, n));
            return b->WaitInput(o, n);
          }
          void OutputFinal(size_t o, size_t n) override {
            a->OutputFinal(o, n);
            b->OutputFinal(o, n);
          }
        } both;
        both.a = &p;
        both.b = checks[r].get();
        algos::Context sctx = ctx;
        sctx.staging = &both;
        Status s = algos::AllReduceRing(sctx, hsend, host_out[r].data(), c.count, DataType::kFloat32,
                                        ReduceOp::kSum, tuning);
        Status f = p.Finish(s.ok());
        return s.ok() ? f : s;
      });
  for (int r = 0; r < c.n; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  for (int r = 0; r < c.n; ++r) {
    size_t wrong = 0, unreported = 0, twice = 0;
    for (size_t i = 0; i < c.count; ++i) {
      float want = 0;
      for (int q = 0; q < c.n; ++q) want += Input(q, i);
      wrong += dev_out[r][i] == want ? 0 : 1;
    }
    for (int v : checks[r]->reported()) {
      unreported += v == 0 ? 1 : 0;
      twice += v > 1 ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r;
    EXPECT_EQ(unreported, 0u) << "rank " << r << ": output bytes never reported final";
    EXPECT_EQ(twice, 0u) << "rank " << r << ": output bytes reported final more than once";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingStreams,
                         ::testing::Values(Case{2, 0, false}, Case{2, 1, true}, Case{3, 2, false},
                                           Case{2, 100003, false}, Case{2, 1000003, false}, Case{2, 1000003, true},
                                           Case{3, 700001, false}, Case{3, 700001, true}, Case{1, 70001, false},
                                           Case{1, 70001, true}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "n" + std::to_string(i.param.n) + "_count" + std::to_string(i.param.count) +
                                  (i.param.in_place ? "_in_place" : "_out_of_place");
                         });

TEST(Streams, OnlyTheRingAllReduceStreams) {
  EXPECT_TRUE(algos::Streams(algos::Collective::kAllReduce, algos::Algorithm::kRing));
  EXPECT_FALSE(algos::Streams(algos::Collective::kAllReduce, algos::Algorithm::kRecursiveDoubling));
  EXPECT_FALSE(algos::Streams(algos::Collective::kBroadcast, algos::Algorithm::kTree));
}

}  // namespace
}  // namespace chorus
