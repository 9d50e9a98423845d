// Every algorithm in algos/collectives.h against a scalar reference, through real TCP
// transports on loopback: all 8 dtypes, all 5 ops (sampled on the large sizes), counts
// {0, 1, 7, n-1, 1023, 1 MiB + 3 elements}, world sizes 1..5, in place and out of
// place, varying roots and chunk sizes (down to one element per chunk, so the
// pipelines run with many chunks and uneven tails).
#include "algos/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "algos/fingerprint.h"
#include "tests/algos/tcp_world.h"
#include "tests/algos/typed_values.h"

namespace chorus::testing {
namespace {

using algos::Collective;
using algos::Context;

enum class Algo {
  kAllReduceRing,
  kAllReduceRd,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll
};

const char* AlgoName(Algo a) {
  switch (a) {
    case Algo::kAllReduceRing:
      return "all_reduce_ring";
    case Algo::kAllReduceRd:
      return "all_reduce_recursive_doubling";
    case Algo::kBroadcast:
      return "broadcast_tree";
    case Algo::kReduce:
      return "reduce_tree";
    case Algo::kAllGather:
      return "all_gather_ring";
    case Algo::kReduceScatter:
      return "reduce_scatter_ring";
    case Algo::kGather:
      return "gather";
    case Algo::kScatter:
      return "scatter";
    case Algo::kAllToAll:
      return "all_to_all_pairwise";
  }
  return "?";
}

Collective CollectiveOf(Algo a) {
  switch (a) {
    case Algo::kAllReduceRing:
    case Algo::kAllReduceRd:
      return Collective::kAllReduce;
    case Algo::kBroadcast:
      return Collective::kBroadcast;
    case Algo::kReduce:
      return Collective::kReduce;
    case Algo::kAllGather:
      return Collective::kAllGather;
    case Algo::kReduceScatter:
      return Collective::kReduceScatter;
    case Algo::kGather:
      return Collective::kGather;
    case Algo::kScatter:
      return Collective::kScatter;
    case Algo::kAllToAll:
      return Collective::kAllToAll;
  }
  return Collective::kBarrier;
}

bool Reduces(Algo a) {
  return a == Algo::kAllReduceRing || a == Algo::kAllReduceRd || a == Algo::kReduce || a == Algo::kReduceScatter;
}
bool Rooted(Algo a) { return a == Algo::kBroadcast || a == Algo::kReduce || a == Algo::kGather || a == Algo::kScatter; }

struct Case {
  Algo algo;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
  size_t chunk_bytes;

  std::string Describe(int n) const {
    std::string s = std::string(AlgoName(algo)) + " n=" + std::to_string(n) + " " + DataTypeName(dtype);
    if (Reduces(algo)) s += std::string(" ") + ReduceOpName(op);
    s += " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place");
    if (Rooted(algo)) s += " root=" + std::to_string(root);
    return s + " chunk_bytes=" + std::to_string(chunk_bytes);
  }
};

// A value no correct result holds (inputs and results stay within +-100).
constexpr double kSentinel = 111;

Status Mismatch(int rank, size_t i, double got, double want) {
  return InternalError("rank " + std::to_string(rank) + ": element " + std::to_string(i) + " is " +
                       std::to_string(got) + ", want " + std::to_string(want));
}

// One rank's part of a case: fill its inputs, run the algorithm, check its outputs.
// `seconds`, when given, receives how long the all-reduce call itself took.
Status RankBody(const Case& c, int n, int rank, const Context& ctx, double* seconds) {
  const DataType t = c.dtype;
  const size_t count = c.count;
  const size_t n_sz = static_cast<size_t>(n);
  const size_t es = DataTypeSize(t);
  algos::Tuning tuning;
  tuning.chunk_bytes = c.chunk_bytes;
  switch (c.algo) {
    case Algo::kAllReduceRing:
    case Algo::kAllReduceRd: {
      TypedBuffer in(t, count), out(t, count);
      for (size_t i = 0; i < count; ++i) in.Set(i, ReductionInput(t, c.op, rank, i));
      out.Fill(kSentinel);
      void* dst = c.in_place ? in.data() : out.data();
      const auto start = std::chrono::steady_clock::now();
      Status st = c.algo == Algo::kAllReduceRing
                      ? algos::AllReduceRing(ctx, in.data(), dst, count, t, c.op, tuning)
                      : algos::AllReduceRecursiveDoubling(ctx, in.data(), dst, count, t, c.op);
      if (seconds != nullptr) {
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      CHORUS_RETURN_IF_ERROR(st);
      const TypedBuffer& res = c.in_place ? in : out;
      for (size_t i = 0; i < count; ++i) {
        const double want = ReductionReference(t, c.op, n, i);
        if (!Matches(t, c.op, res.Get(i), want)) return Mismatch(rank, i, res.Get(i), want);
      }
      return Status::Ok();
    }
    case Algo::kBroadcast: {
      TypedBuffer buf(t, count);
      for (size_t i = 0; i < count; ++i) buf.Set(i, rank == c.root ? TagValue(t, c.root, i) : kSentinel);
      CHORUS_RETURN_IF_ERROR(algos::BroadcastTree(ctx, buf.data(), count, t, c.root, tuning));
      for (size_t i = 0; i < count; ++i) {
        if (buf.Get(i) != TagValue(t, c.root, i)) return Mismatch(rank, i, buf.Get(i), TagValue(t, c.root, i));
      }
      return Status::Ok();
    }
    case Algo::kReduce: {
      TypedBuffer in(t, count), out(t, count);
      for (size_t i = 0; i < count; ++i) in.Set(i, ReductionInput(t, c.op, rank, i));
      out.Fill(kSentinel);
      const bool root = rank == c.root;
      // Non-roots pass no recv buffer at all: it must not be touched.
      void* dst = !root ? nullptr : c.in_place ? in.data() : out.data();
      CHORUS_RETURN_IF_ERROR(algos::ReduceTree(ctx, in.data(), dst, count, t, c.op, c.root, tuning));
      if (!root) return Status::Ok();
      const TypedBuffer& res = c.in_place ? in : out;
      for (size_t i = 0; i < count; ++i) {
        const double want = ReductionReference(t, c.op, n, i);
        if (!Matches(t, c.op, res.Get(i), want)) return Mismatch(rank, i, res.Get(i), want);
      }
      return Status::Ok();
    }
    case Algo::kAllGather: {
      TypedBuffer in(t, count), out(t, n_sz * count);
      out.Fill(kSentinel);
      // In place: our block already sits at its place in recv.
      TypedBuffer& src_buf = c.in_place ? out : in;
      const size_t base = c.in_place ? rank * count : 0;
      for (size_t i = 0; i < count; ++i) src_buf.Set(base + i, TagValue(t, rank, i));
      const void* src = static_cast<const char*>(src_buf.data()) + base * es;
      CHORUS_RETURN_IF_ERROR(algos::AllGatherRing(ctx, src, out.data(), count, t, tuning));
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < count; ++i) {
          const size_t k = j * count + i;
          if (out.Get(k) != TagValue(t, j, i)) return Mismatch(rank, k, out.Get(k), TagValue(t, j, i));
        }
      }
      return Status::Ok();
    }
    case Algo::kReduceScatter: {
      TypedBuffer in(t, n_sz * count), out(t, count);
      for (size_t i = 0; i < n_sz * count; ++i) in.Set(i, ReductionInput(t, c.op, rank, i));
      out.Fill(kSentinel);
      char* dst = c.in_place ? static_cast<char*>(in.data()) + rank * count * es : static_cast<char*>(out.data());
      CHORUS_RETURN_IF_ERROR(algos::ReduceScatterRing(ctx, in.data(), dst, count, t, c.op, tuning));
      const TypedBuffer& res = c.in_place ? in : out;
      const size_t base = c.in_place ? rank * count : 0;
      for (size_t i = 0; i < count; ++i) {
        const double want = ReductionReference(t, c.op, n, rank * count + i);
        if (!Matches(t, c.op, res.Get(base + i), want)) return Mismatch(rank, i, res.Get(base + i), want);
      }
      return Status::Ok();
    }
    case Algo::kGather: {
      const bool root = rank == c.root;
      TypedBuffer in(t, count), out(t, root ? n_sz * count : 0);
      out.Fill(kSentinel);
      TypedBuffer& src_buf = root && c.in_place ? out : in;
      const size_t base = root && c.in_place ? rank * count : 0;
      for (size_t i = 0; i < count; ++i) src_buf.Set(base + i, TagValue(t, rank, i));
      const void* src = static_cast<const char*>(src_buf.data()) + base * es;
      CHORUS_RETURN_IF_ERROR(algos::Gather(ctx, src, root ? out.data() : nullptr, count, t, c.root));
      if (!root) return Status::Ok();
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < count; ++i) {
          const size_t k = j * count + i;
          if (out.Get(k) != TagValue(t, j, i)) return Mismatch(rank, k, out.Get(k), TagValue(t, j, i));
        }
      }
      return Status::Ok();
    }
    case Algo::kScatter: {
      const bool root = rank == c.root;
      TypedBuffer in(t, root ? n_sz * count : 0), out(t, count);
      for (size_t i = 0; i < in.count(); ++i) in.Set(i, TagValue(t, c.root, i));
      out.Fill(kSentinel);
      char* dst =
          root && c.in_place ? static_cast<char*>(in.data()) + rank * count * es : static_cast<char*>(out.data());
      CHORUS_RETURN_IF_ERROR(algos::Scatter(ctx, root ? in.data() : nullptr, dst, count, t, c.root));
      const TypedBuffer& res = root && c.in_place ? in : out;
      const size_t base = root && c.in_place ? rank * count : 0;
      for (size_t i = 0; i < count; ++i) {
        const double want = TagValue(t, c.root, rank * count + i);
        if (res.Get(base + i) != want) return Mismatch(rank, i, res.Get(base + i), want);
      }
      return Status::Ok();
    }
    case Algo::kAllToAll: {
      TypedBuffer in(t, n_sz * count), out(t, n_sz * count);
      for (size_t i = 0; i < n_sz * count; ++i) in.Set(i, TagValue(t, rank, i));
      out.Fill(kSentinel);
      void* dst = c.in_place ? in.data() : out.data();
      CHORUS_RETURN_IF_ERROR(algos::AllToAllPairwise(ctx, in.data(), dst, count, t));
      const TypedBuffer& res = c.in_place ? in : out;
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < count; ++i) {
          // Block j came from rank j, which sent us block `rank` of its buffer.
          const double want = TagValue(t, j, rank * count + i);
          if (res.Get(j * count + i) != want) return Mismatch(rank, j * count + i, res.Get(j * count + i), want);
        }
      }
      return Status::Ok();
    }
  }
  return InternalError("unknown algorithm");
}

void RunCase(TcpWorld& world, const Case& c, std::vector<double>* seconds = nullptr) {
  const int n = world.size();
  if (seconds != nullptr) seconds->assign(n, 0.0);
  const uint64_t fp = algos::Fingerprint(CollectiveOf(c.algo), c.count, c.dtype, c.op, c.root);
  std::vector<Status> st =
      world.Run([&](int) { return fp; },
                [&](int rank, const Context& ctx) {
                  return RankBody(c, n, rank, ctx, seconds != nullptr ? &(*seconds)[rank] : nullptr);
                });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << c.Describe(n) << ": rank " << r << ": " << st[r].ToString();
  }
}

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

class CollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<TcpWorld>> w = TcpWorld::Create(GetParam());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    world_ = std::move(w.value());
  }

  // The sweep for one algorithm: every dtype, counts {0, 1, 7, n-1, 1023, ~1 MiB},
  // all ops on the small counts and one (rotating) op on the large one, in place and
  // out of place, roots and chunk sizes varying with the case.
  void Sweep(Algo algo) {
    const int n = GetParam();
    for (int ti = 0; ti < 8; ++ti) {
      const DataType t = kAllTypes[ti];
      const size_t es = DataTypeSize(t);
      // ~1 MiB per rank: for block collectives the per-rank block, so that the
      // whole buffer stays ~1 MiB too.
      const bool blocks = algo == Algo::kAllGather || algo == Algo::kReduceScatter || algo == Algo::kGather ||
                          algo == Algo::kScatter || algo == Algo::kAllToAll;
      const size_t big = (size_t{1} << 20) / es / (blocks ? n : 1) + 3;
      const std::set<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), 1023, big};
      int ci = 0;
      for (size_t count : counts) {
        ++ci;
        std::vector<ReduceOp> ops = {ReduceOp::kSum};
        if (Reduces(algo)) {
          if (count == big) {
            ops = {kAllOps[(ti + ci) % 5]};
          } else {
            ops.assign(std::begin(kAllOps), std::end(kAllOps));
          }
        }
        // Chunks of one element for tiny counts, a few elements for 1023, 64 KiB
        // (many chunks per block) for the large count; sizes not multiples of es.
        const size_t chunk_bytes = count <= 7 ? 1 : count == 1023 ? 7 * es + 3 : (64 << 10) + 5;
        for (ReduceOp op : ops) {
          for (bool in_place : {false, true}) {
            if (algo == Algo::kBroadcast && in_place) continue;  // broadcast has one buffer
            const int root = Rooted(algo) ? (ti + ci + (in_place ? 1 : 0)) % n : 0;
            RunCase(*world_, Case{algo, t, op, count, in_place, root, chunk_bytes});
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }

  std::unique_ptr<TcpWorld> world_;
};

TEST_P(CollectivesTest, AllReduceRing) { Sweep(Algo::kAllReduceRing); }
TEST_P(CollectivesTest, AllReduceRecursiveDoubling) { Sweep(Algo::kAllReduceRd); }
TEST_P(CollectivesTest, BroadcastTree) { Sweep(Algo::kBroadcast); }
TEST_P(CollectivesTest, ReduceTree) { Sweep(Algo::kReduce); }
TEST_P(CollectivesTest, AllGatherRing) { Sweep(Algo::kAllGather); }
TEST_P(CollectivesTest, ReduceScatterRing) { Sweep(Algo::kReduceScatter); }
TEST_P(CollectivesTest, Gather) { Sweep(Algo::kGather); }
TEST_P(CollectivesTest, Scatter) { Sweep(Algo::kScatter); }
TEST_P(CollectivesTest, AllToAllPairwise) { Sweep(Algo::kAllToAll); }

// 16 MiB of fp32, SUM, with the default chunk size: the size where pipelining
// matters. Prints the bus bandwidth reached (loopback, all ranks on this machine's
// cores, so a smoke number, not a benchmark).
TEST_P(CollectivesTest, AllReduceRing16MiB) {
  const int n = GetParam();
  const size_t count = (size_t{16} << 20) / sizeof(float);
  const Case c{Algo::kAllReduceRing, DataType::kFloat32, ReduceOp::kSum, count, false, 0, algos::Tuning().chunk_bytes};
  std::vector<double> seconds;
  RunCase(*world_, c, &seconds);
  const double t = *std::max_element(seconds.begin(), seconds.end());
  const double algbw = count * sizeof(float) / t / 1e9;
  std::printf("all_reduce_ring n=%d 16 MiB fp32 sum: %.1f ms, algbw %.2f GB/s, busbw %.2f GB/s\n", n, t * 1e3, algbw,
              n > 1 ? algbw * 2 * (n - 1) / n : 0.0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::testing
