// Every collective on streamed bounce buffers of device buffers, without a GPU: each rank's
// "device" memory is host memory that reaches the algorithm only through the staging
// pipeline (chorus/staging_pipeline.h) over slow host copy engines (host_copies.h), and
// leaves it only through the pipeline. The host bounce buffers start as NaN, so input read
// before it was waited for shows up as a wrong result. Buffers and in-place aliasing are
// laid out as the library lays them out: CallIo gives the bytes each rank reads and
// writes, and an input inside the output is staged inside the output's bounce buffer.
// The algorithms run on real TCP transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/fingerprint.h"
#include "algos/input_order.h"
#include "algos/selector.h"
#include "chorus/collective_call.h"
#include "chorus/signalled_staging.h"
#include "chorus/staging_pipeline.h"
#include "tests/algos/fake_streams.h"
#include "tests/algos/host_copies.h"
#include "tests/algos/tcp_world.h"

namespace chorus {
namespace {

using algos::Collective;
using internal::CollectiveCall;
using internal::DeviceIo;
using internal::StagingPipeline;
using testing::HostCopies;

// Checks the hook contract: every output byte is reported final exactly once.
class ContractCheck final : public algos::StreamStaging {
 public:
  explicit ContractCheck(size_t bytes) : reported_(bytes, 0) {}
  Status WaitInput(size_t, size_t) override { return Status::Ok(); }
  void OutputFinal(size_t offset, size_t bytes) override {
    for (size_t i = offset; i < offset + bytes; ++i) {
      ++(i < reported_.size() ? reported_[i] : beyond_);
    }
  }
  size_t unreported() const {
    return Count([](int v) { return v == 0; });
  }
  size_t twice() const {
    return Count([](int v) { return v > 1; });
  }
  int beyond() const { return beyond_; }

 private:
  template <typename F>
  size_t Count(F f) const {
    size_t k = 0;
    for (int v : reported_) k += f(v) ? 1 : 0;
    return k;
  }
  std::vector<int> reported_;
  int beyond_ = 0;
};

// Both hooks: the pipeline's, and the contract check's on the side.
struct Both final : algos::StreamStaging {
  algos::StreamStaging* a;
  algos::StreamStaging* b;
  Both(algos::StreamStaging* x, algos::StreamStaging* y) : a(x), b(y) {}
  void InputOrder(const std::vector<std::pair<size_t, size_t>>& ranges) override { a->InputOrder(ranges); }
  Status WaitInput(size_t o, size_t n) override {
    CHORUS_RETURN_IF_ERROR(a->WaitInput(o, n));
    return b->WaitInput(o, n);
  }
  void OutputFinal(size_t o, size_t n) override {
    a->OutputFinal(o, n);
    b->OutputFinal(o, n);
  }
};

// Element j of rank q's input: small integers, so float sums are exact.
float Input(int q, size_t j) { return static_cast<float>((q + 1) * 3 + static_cast<int>(j % 1013)); }

// What rank r's recv holds afterwards, element i (NaN: nothing expected there).
float Expected(Collective k, int n, int r, int root, size_t count, size_t i) {
  auto sum = [&](size_t j) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += Input(q, j);
    return s;
  };
  const size_t blk = i / (count ? count : 1), at = i % (count ? count : 1);
  switch (k) {
    case Collective::kAllReduce:
    case Collective::kReduce: return sum(i);
    case Collective::kBroadcast: return Input(root, i);
    case Collective::kAllGather:
    case Collective::kGather: return Input(static_cast<int>(blk), at);
    case Collective::kReduceScatter: return sum(static_cast<size_t>(r) * count + i);
    case Collective::kScatter: return Input(root, static_cast<size_t>(r) * count + i);
    case Collective::kAllToAll: return Input(static_cast<int>(blk), static_cast<size_t>(r) * count + at);
    case Collective::kBarrier: break;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

algos::Algorithm AlgorithmOf(Collective k) {
  switch (k) {
    case Collective::kBroadcast:
    case Collective::kReduce: return algos::Algorithm::kTree;
    case Collective::kGather:
    case Collective::kScatter: return algos::Algorithm::kLinear;
    case Collective::kAllToAll: return algos::Algorithm::kPairwise;
    default: return algos::Algorithm::kRing;
  }
}

// One rank's "device" memory and the call's pointers into it. In place: the input
// inside the output (all_reduce, broadcast, reduce, all_to_all: the same buffer;
// all_gather and gather: our block of it) or the output inside the input
// (reduce_scatter, scatter: our block).
struct RankBuffers {
  std::vector<float> device;
  size_t recv_at = 0, send_at = 0;  // element offsets into device
};

RankBuffers Layout(Collective k, int n, int r, int root, size_t count, bool in_place) {
  // The elements this rank reads and writes, as the library counts them.
  const DeviceIo sizes =
      internal::CallIo(CollectiveCall{k, nullptr, nullptr, count, DataType::kFloat32, ReduceOp::kSum, root}, r, n);
  const size_t in = sizes.send_bytes / sizeof(float), out = sizes.recv_bytes / sizeof(float);
  const bool rooted = k == Collective::kReduce || k == Collective::kGather || k == Collective::kScatter;
  RankBuffers b;
  const bool alias = k == Collective::kBroadcast || (in_place && (!rooted || r == root));
  if (!alias) {
    b.device.assign(in + out, 0);
    b.recv_at = in;
  } else if (k == Collective::kAllGather || k == Collective::kGather) {
    b.device.assign(out, 0);
    b.send_at = static_cast<size_t>(k == Collective::kGather ? root : r) * count;
  } else if (k == Collective::kReduceScatter || k == Collective::kScatter) {
    b.device.assign(in, 0);
    b.recv_at = static_cast<size_t>(k == Collective::kScatter ? root : r) * count;
  } else {
    b.device.assign(std::max(in, out), 0);
  }
  return b;
}

struct Case {
  Collective kind;
  int n;
  size_t count;
  bool in_place;
  // Not the collective's default algorithm: broadcast's chain, all_gather's recursive doubling.
  std::optional<algos::Algorithm> algorithm;
};

algos::Algorithm AlgorithmOf(const Case& c) { return c.algorithm.value_or(AlgorithmOf(c.kind)); }

// Every rank's "device" memory laid out as the library lays it out, the output poisoned
// and the input written (it may lie inside the output), and NaN host bounce buffers.
struct World {
  std::vector<RankBuffers> dev;
  std::vector<DeviceIo> io;
  std::vector<std::vector<float>> host_in, host_out;

  World(const Case& c, int root) : dev(c.n), io(c.n), host_in(c.n), host_out(c.n) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int r = 0; r < c.n; ++r) {
      dev[r] = Layout(c.kind, c.n, r, root, c.count, c.in_place);
      std::vector<float>& d = dev[r].device;
      CollectiveCall call{c.kind,  d.data() + dev[r].send_at, d.data() + dev[r].recv_at,
                          c.count, DataType::kFloat32,        ReduceOp::kSum,
                          root};
      io[r] = internal::CallIo(call, r, c.n);
      for (size_t i = 0; i < io[r].recv_bytes / sizeof(float); ++i) d[dev[r].recv_at + i] = -1.0f;
      for (size_t j = 0; j < io[r].send_bytes / sizeof(float); ++j) d[dev[r].send_at + j] = Input(r, j);
      host_out[r].assign(io[r].recv_bytes / sizeof(float), nan);
      host_in[r].assign(io[r].send_bytes / sizeof(float), nan);
    }
  }

  // Rank r's input bounce buffer: inside the output's where the input lies inside the output.
  float* HostSend(int r) {
    const auto* send = static_cast<const char*>(io[r].send);
    const auto* recv = static_cast<const char*>(io[r].recv);
    const bool aliased =
        io[r].send_bytes && io[r].recv_bytes && send >= recv && send + io[r].send_bytes <= recv + io[r].recv_bytes;
    return aliased ? host_out[r].data() + (send - recv) / sizeof(float) : host_in[r].data();
  }

  // Every rank's output on its "device" is what the collective gives.
  void ExpectResults(const Case& c, int root) const {
    for (int r = 0; r < c.n; ++r) {
      size_t wrong = 0;
      const size_t elems = io[r].recv_bytes / sizeof(float);
      for (size_t i = 0; i < elems; ++i) {
        const float want = Expected(c.kind, c.n, r, root, c.count, i);
        if (dev[r].device[dev[r].recv_at + i] != want && wrong++ < 3) {
          ADD_FAILURE() << "rank " << r << " element " << i << ": " << dev[r].device[dev[r].recv_at + i] << ", want "
                        << want;
        }
      }
      EXPECT_EQ(wrong, 0u) << "rank " << r << " of " << elems;
    }
  }
};

std::string Name(const ::testing::TestParamInfo<Case>& i) {
  return std::string(algos::CollectiveName(i.param.kind)) + "_n" + std::to_string(i.param.n) + "_count" +
         std::to_string(i.param.count) + (i.param.in_place ? "_in_place" : "") +
         (i.param.algorithm ? std::string("_") + algos::AlgorithmName(*i.param.algorithm) : "");
}

class Streamed : public ::testing::TestWithParam<Case> {};

constexpr size_t kSegment = 64 << 10;

TEST_P(Streamed, ResultsMatchAndEveryOutputByteIsReportedOnce) {
  const Case c = GetParam();
  const int root = c.n - 1;
  ASSERT_TRUE(algos::Streams(c.kind, AlgorithmOf(c)));
  Result<std::unique_ptr<testing::TcpWorld>> w = testing::TcpWorld::Create(c.n);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  World world(c, root);
  std::vector<DeviceIo>& io = world.io;
  std::vector<std::unique_ptr<ContractCheck>> checks(c.n);
  for (int r = 0; r < c.n; ++r) checks[r] = std::make_unique<ContractCheck>(io[r].recv_bytes);
  algos::Tuning tuning;
  tuning.chunk_bytes = 16 << 10;  // many chunks per 64K segment and per block
  const uint64_t fp = algos::Fingerprint(c.kind, c.count, DataType::kFloat32, ReduceOp::kSum, root);
  std::vector<std::vector<ptrdiff_t>> copied(c.n);  // each rank's input copies, in order (bytes into its input)
  std::vector<Status> st = w.value()->Run(
      [&](int) { return fp; },
      [&](int r, const algos::Context& ctx) -> Status {
        HostCopies in(std::chrono::microseconds(200)), out(std::chrono::microseconds(200));
        StagingPipeline p(in, out, kSegment, ctx.deadline);
        float* hsend = world.HostSend(r);  // as the library stages it
        CHORUS_RETURN_IF_ERROR(p.BeginInput(hsend, io[r].send, io[r].send_bytes));
        p.SetOutput(io[r].recv, world.host_out[r].data(), io[r].recv_bytes);
        Both both(&p, checks[r].get());
        algos::Context sctx = ctx;
        sctx.staging = &both;
        CollectiveCall on{c.kind, hsend, world.host_out[r].data(), c.count, DataType::kFloat32, ReduceOp::kSum, root};
        Status s = internal::Dispatch(sctx, on, AlgorithmOf(c), tuning);
        for (auto [dst, bytes] : in.started()) {
          copied[r].push_back(static_cast<const char*>(dst) - reinterpret_cast<const char*>(hsend));
        }
        Status f = p.Finish(s.ok());
        return s.ok() ? f : s;
      });
  for (int r = 0; r < c.n; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  world.ExpectResults(c, root);
  for (int r = 0; r < c.n; ++r) {
    EXPECT_EQ(checks[r]->unreported(), 0u) << "rank " << r << ": output bytes never reported final";
    EXPECT_EQ(checks[r]->twice(), 0u) << "rank " << r << ": output bytes reported final more than once";
    EXPECT_EQ(checks[r]->beyond(), 0) << "rank " << r << ": bytes reported beyond the output";
  }
  // The input comes to the host in the order the rank reads it, block by block: the
  // ring all_reduce blocks r, r-1, ..., the ring reduce_scatter r-1, r-2, ..., all_to_all
  // the blocks for ranks r+1, r+2, ... So the first copy is where the first block read
  // starts, and the middle of the second block read comes before that of the last.
  const bool ordered =
      c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll;
  for (int r = 0; ordered && c.count >= static_cast<size_t>(c.n) && !c.in_place && r < c.n; ++r) {
    auto read = [&](int i) {  // the i-th block this rank reads, in elements of its input
      if (c.kind == Collective::kAllReduce) return algos::EvenBlock(c.count, c.n, (r - i + c.n) % c.n);
      const int b = c.kind == Collective::kAllToAll ? (r + 1 + i) % c.n : (r - 1 - i + 2 * c.n) % c.n;
      return algos::Span{static_cast<size_t>(b) * c.count, c.count};
    };
    auto position = [&](size_t element) {  // where the copy of this element's segment came
      const ptrdiff_t seg = static_cast<ptrdiff_t>(element * sizeof(float) / kSegment * kSegment);
      return std::find(copied[r].begin(), copied[r].end(), seg) - copied[r].begin();
    };
    ASSERT_FALSE(copied[r].empty()) << "rank " << r;
    EXPECT_EQ(position(read(0).offset), 0) << "rank " << r;
    auto mid = [&](int i) { return read(i).offset + read(i).count / 2; };
    if (c.n > 2) {
      EXPECT_LT(position(mid(1)), position(mid(c.n - 1))) << "rank " << r;
    }
  }
}

// The same collectives staged with signal flags (CHORUS_STAGING_SYNC=signals): the input
// comes over in address order whatever order the algorithm reads it in, each segment
// behind its IN flag; results go back behind their OUT flags (fake_streams.h stands in
// for the two CUDA streams).
TEST_P(Streamed, WithSignalFlagsResultsMatch) {
  const Case c = GetParam();
  const int root = c.n - 1;
  Result<std::unique_ptr<testing::TcpWorld>> w = testing::TcpWorld::Create(c.n);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  constexpr size_t kMaxSegments = 1024;
  World world(c, root);
  std::vector<DeviceIo>& io = world.io;
  std::vector<std::vector<uint32_t>> flags(c.n, std::vector<uint32_t>(internal::SignalView::FlagsFor(kMaxSegments)));
  for (int r = 0; r < c.n; ++r) {
    io[r].streamed = true;
    io[r].input_order = algos::InputReadOrder(c.kind, AlgorithmOf(c), r, c.n, c.count, DataType::kFloat32);
  }
  algos::Tuning tuning;
  tuning.chunk_bytes = 16 << 10;
  const uint64_t fp = algos::Fingerprint(c.kind, c.count, DataType::kFloat32, ReduceOp::kSum, root);
  std::vector<Status> st = w.value()->Run(
      [&](int) { return fp; },
      [&](int r, const algos::Context& ctx) -> Status {
        const internal::SignalView view{flags[r].data(), kMaxSegments};
        const internal::SignalledWindow win = internal::PlanWindow(io[r], 1, kSegment, kMaxSegments);
        // The first input copy holds the first block the ring all_reduce reads: our own.
        if (c.kind == Collective::kAllReduce && c.count >= static_cast<size_t>(c.n) && !win.in_order.empty() &&
            win.in_order.front() != algos::EvenBlock(c.count, c.n, r).offset * sizeof(float) / kSegment) {
          return InternalError("the input's first copy is segment " + std::to_string(win.in_order.front()));
        }
        char* hout = reinterpret_cast<char*>(world.host_out[r].data());
        char* hsend = reinterpret_cast<char*>(world.HostSend(r));
        testing::FakeStreams streams(view, win, 0, io[r], hsend, hout);
        internal::HostRun run = [&](const void* s, void* out, algos::StreamStaging* staging) {
          algos::Context sctx = ctx;
          sctx.staging = staging;
          CollectiveCall on{c.kind, s, out, c.count, DataType::kFloat32, ReduceOp::kSum, root};
          return internal::Dispatch(sctx, on, AlgorithmOf(c), tuning);
        };
        Status s = internal::RunSignalledWindow(view, win, io[r], run, hsend, hout, ctx.deadline);
        streams.Join();
        if (s.ok() && view.Load(internal::SignalView::kLanded) != win.seq) {
          return InternalError("the caller's stream did not get through");
        }
        return s;
      });
  for (int r = 0; r < c.n; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  world.ExpectResults(c, root);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Collective k : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                       Collective::kReduceScatter, Collective::kGather, Collective::kScatter, Collective::kAllToAll}) {
    // Many 64K segments; blocks of gather/scatter/all_to_all above kCreditAtBytes.
    const size_t big =
        k == Collective::kAllReduce || k == Collective::kBroadcast || k == Collective::kReduce ? 1000003 : 100003;
    for (bool in_place : {false, true}) {
      cases.push_back({k, 1, 7001, in_place});
      cases.push_back({k, 2, 0, in_place});
      cases.push_back({k, 2, 5, in_place});
      cases.push_back({k, 2, big, in_place});
      cases.push_back({k, 3, big / 3 + 1, in_place});
    }
  }
  cases.push_back({Collective::kBroadcast, 3, 1000003, false, algos::Algorithm::kChain});
  cases.push_back({Collective::kBroadcast, 4, 7001, false, algos::Algorithm::kChain});
  for (bool in_place : {false, true}) {
    cases.push_back({Collective::kAllGather, 4, 25001, in_place, algos::Algorithm::kRecursiveDoubling});
    cases.push_back({Collective::kAllGather, 4, 100003, in_place, algos::Algorithm::kRecursiveDoubling});  // credited
    cases.push_back({Collective::kAllGather, 2, 7, in_place, algos::Algorithm::kRecursiveDoubling});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, Streamed, ::testing::ValuesIn(Cases()), Name);

TEST(Streams, EveryCollectiveButTheSmallAllReduceAndTheBarrier) {
  EXPECT_TRUE(algos::Streams(Collective::kAllReduce, algos::Algorithm::kRing));
  EXPECT_TRUE(algos::Streams(Collective::kBroadcast, algos::Algorithm::kTree));
  EXPECT_TRUE(algos::Streams(Collective::kAllToAll, algos::Algorithm::kPairwise));
  EXPECT_FALSE(algos::Streams(Collective::kAllReduce, algos::Algorithm::kRecursiveDoubling));
  EXPECT_FALSE(algos::Streams(Collective::kBarrier, algos::Algorithm::kDissemination));
  EXPECT_FALSE(algos::Streams(Collective::kAllGather, algos::Algorithm::kCudaIpc));
}

}  // namespace
}  // namespace chorus
