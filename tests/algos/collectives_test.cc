// Every algorithm in algos/collectives.h (and the barrier) against a scalar
// reference, through real TCP transports on loopback (tcp_world.h), on world sizes
// 1..5 (Rabenseifner's and the tree's all_reduce also on 6..8, past their first folds
// and levels; the hierarchical broadcast and all_gather there too, on 3 hosts and more
// ranks a host; the hierarchical reduce and reduce_scatter likewise):
//   - all 8 dtypes x all 5 ops at counts {0, 1, 7, n-1, 1023}, in place and out of
//     place, roots varying with the case;
//   - 1 MiB + 3 elements: every dtype, one op per dtype (rotating), both placements;
//   - 16 MiB: one case per algorithm on every other world size, dtype/op/placement
//     rotating;
//   - chunk sizes down to one element (pipelines with many chunks and uneven tails,
//     chunk sizes that are not multiples of the element size) and the default.
// Under a sanitizer the small counts take one op per case (rotating) instead of all
// five: the op grid exercises the kernels, which the plain build sweeps; the sanitizers
// look at the schedules, which every op shares.
// Inputs are fresh for every case (typed_values.h); integer results must be exact,
// floating-point ones within the rounding of n terms; all_reduce results must also
// be bit-identical on every rank, and send buffers must come back untouched.
// Also: the barrier really waits for the last rank, and every algorithm runs
// concurrently with all the others on the same transports (one tag space each).
#include "algos/collectives.h"
#include "algos/credits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algos/barrier.h"
#include "algos/fingerprint.h"
#include "tests/algos/tcp_world.h"
#include "tests/algos/typed_values.h"
#include "tests/util/slowdown.h"

namespace chorus::testing {
namespace {

using algos::Collective;
using algos::Context;

enum class Algo {
  kAllReduceRing,
  kAllReduceRd,
  kAllReduceHierarchical,  // hosts as HostsFor says
  kBroadcast,
  kBroadcastChain,
  kReduce,
  kAllGather,
  kAllGatherRd,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kAllReduceRabenseifner,  // last, so the others keep their seeds and rotations
  kBroadcastScatterAllGather,
  kAllReduceTree,
  kBroadcastHierarchical,      // hosts as HostsFor says
  kAllGatherHierarchical,      // hosts as HostsFor says
  kReduceHierarchical,         // hosts as HostsFor says
  kReduceScatterHierarchical,  // hosts as HostsFor says
};

const char* AlgoName(Algo a) {
  switch (a) {
    case Algo::kAllReduceRing: return "all_reduce_ring";
    case Algo::kAllReduceRd: return "all_reduce_recursive_doubling";
    case Algo::kAllReduceHierarchical: return "all_reduce_hierarchical";
    case Algo::kBroadcast: return "broadcast_tree";
    case Algo::kBroadcastChain: return "broadcast_chain";
    case Algo::kReduce: return "reduce_tree";
    case Algo::kAllGather: return "all_gather_ring";
    case Algo::kAllGatherRd: return "all_gather_recursive_doubling";
    case Algo::kReduceScatter: return "reduce_scatter_ring";
    case Algo::kGather: return "gather";
    case Algo::kScatter: return "scatter";
    case Algo::kAllToAll: return "all_to_all_pairwise";
    case Algo::kAllReduceRabenseifner: return "all_reduce_rabenseifner";
    case Algo::kBroadcastScatterAllGather: return "broadcast_scatter_allgather";
    case Algo::kAllReduceTree: return "all_reduce_tree";
    case Algo::kBroadcastHierarchical: return "broadcast_hierarchical";
    case Algo::kAllGatherHierarchical: return "all_gather_hierarchical";
    case Algo::kReduceHierarchical: return "reduce_hierarchical";
    case Algo::kReduceScatterHierarchical: return "reduce_scatter_hierarchical";
  }
  return "?";
}

Collective CollectiveOf(Algo a) {
  switch (a) {
    case Algo::kAllReduceRing:
    case Algo::kAllReduceRd:
    case Algo::kAllReduceHierarchical:
    case Algo::kAllReduceRabenseifner:
    case Algo::kAllReduceTree: return Collective::kAllReduce;
    case Algo::kBroadcast:
    case Algo::kBroadcastChain:
    case Algo::kBroadcastScatterAllGather:
    case Algo::kBroadcastHierarchical: return Collective::kBroadcast;
    case Algo::kReduce:
    case Algo::kReduceHierarchical: return Collective::kReduce;
    case Algo::kAllGather:
    case Algo::kAllGatherRd:
    case Algo::kAllGatherHierarchical: return Collective::kAllGather;
    case Algo::kReduceScatter:
    case Algo::kReduceScatterHierarchical: return Collective::kReduceScatter;
    case Algo::kGather: return Collective::kGather;
    case Algo::kScatter: return Collective::kScatter;
    case Algo::kAllToAll: return Collective::kAllToAll;
  }
  return Collective::kBarrier;
}

bool Reduces(Algo a) {
  return a == Algo::kAllReduceRing || a == Algo::kAllReduceRd || a == Algo::kAllReduceHierarchical ||
         a == Algo::kAllReduceRabenseifner || a == Algo::kAllReduceTree || a == Algo::kReduce ||
         a == Algo::kReduceScatter || a == Algo::kReduceHierarchical || a == Algo::kReduceScatterHierarchical;
}
// Broadcast's algorithms with one buffer only, so no out-of-place variant (the tree and
// the chain have both).
bool OneBuffer(Algo a) { return a == Algo::kBroadcastScatterAllGather || a == Algo::kBroadcastHierarchical; }
bool Rooted(Algo a) {
  return a == Algo::kBroadcast || a == Algo::kBroadcastChain || OneBuffer(a) || a == Algo::kReduce ||
         a == Algo::kReduceHierarchical || a == Algo::kGather || a == Algo::kScatter;
}
// Collectives whose count is per rank block (buffers of n * count elements).
bool Blocks(Algo a) {
  return a == Algo::kAllGather || a == Algo::kAllGatherRd || a == Algo::kAllGatherHierarchical ||
         a == Algo::kReduceScatter || a == Algo::kReduceScatterHierarchical || a == Algo::kGather ||
         a == Algo::kScatter || a == Algo::kAllToAll;
}

// The hosts the hierarchical algorithms see, never rank ranges: on 6 ranks three hosts
// of two (r % 3); on other even n two hosts of n/2 (r % 2: by rails); on odd n hosts of
// (n+1)/2 and the rest ranks (by leaders, or bridges), except all_gather's and
// reduce_scatter's, which need even hosts: there every rank a host of its own.
algos::Topology HostsFor(Algo a, int n) {
  std::vector<std::string> hosts;
  for (int r = 0; r < n; ++r) {
    if (n == 6 && a != Algo::kAllReduceHierarchical) {
      hosts.push_back(std::to_string(r % 3));
    } else if (n % 2 == 0) {
      hosts.push_back(std::to_string(r % 2));
    } else {
      const bool even_only = a == Algo::kAllGatherHierarchical || a == Algo::kReduceScatterHierarchical;
      hosts.push_back(even_only ? std::to_string(r) : r <= n / 2 ? "a" : "b");
    }
  }
  return algos::Topology::FromHostIds(hosts);
}

struct Case {
  Algo algo;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
  size_t chunk_bytes;
  uint64_t seed;
  // Also check that out-of-place send buffers come back untouched (skipped on the
  // 16 MiB cases to save time: the smaller ones cover it).
  bool check_send = true;
  bool crowded_cores = false;  // Tuning::crowded_cores: the trees' large chunks all wait for credits

  std::string Describe(int n) const {
    std::string s = std::string(AlgoName(algo)) + " n=" + std::to_string(n) + " " + DataTypeName(dtype);
    if (Reduces(algo)) s += std::string(" ") + ReduceOpName(op);
    s += " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place");
    if (Rooted(algo)) s += " root=" + std::to_string(root);
    return s + " chunk_bytes=" + std::to_string(chunk_bytes) + (crowded_cores ? " crowded" : "") +
           " seed=" + std::to_string(seed);
  }
};

Status AtRank(int rank, const std::string& what, Status st) {
  if (st.ok()) return st;
  return st.WithContext("rank " + std::to_string(rank) + " " + what);
}

// The send buffer of an out-of-place call is const: it must still hold the input.
Status CheckReductionInputKept(const Case& c, int rank, const TypedBuffer& in) {
  if (!c.check_send) return Status::Ok();
  TypedBuffer want(c.dtype, in.count());
  FillReductionInput(c.dtype, c.op, c.seed, rank, 0, in.count(), want.data());
  return AtRank(rank, "send buffer", CheckSameBytes(in.data(), want.data(), in.bytes()));
}

// One rank's part of a case: fill its inputs, run the algorithm, check its outputs.
// all_reduce leaves its result in `result` (checked across ranks by the caller);
// `seconds` receives how long the algorithm itself took.
Status RankBody(const Case& c, int n, int rank, const Context& ctx, std::unique_ptr<TypedBuffer>* result,
                double* seconds) {
  const DataType t = c.dtype;
  const size_t count = c.count;
  const size_t n_sz = static_cast<size_t>(n);
  const size_t es = DataTypeSize(t);
  const size_t bytes = count * es;
  const uint64_t seed = c.seed;
  algos::Tuning tuning;
  tuning.chunk_bytes = c.chunk_bytes;
  tuning.crowded_cores = c.crowded_cores;
  const auto start = std::chrono::steady_clock::now();
  auto timed = [&](Status st) {
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return AtRank(rank, "algorithm", st);
  };
  switch (c.algo) {
    case Algo::kAllReduceRing:
    case Algo::kAllReduceRd:
    case Algo::kAllReduceHierarchical:
    case Algo::kAllReduceRabenseifner:
    case Algo::kAllReduceTree: {
      auto in = std::make_unique<TypedBuffer>(t, count);
      auto out = std::make_unique<TypedBuffer>(t, count);
      FillReductionInput(t, c.op, seed, rank, 0, count, in->data());
      out->Poison();
      void* dst = c.in_place ? in->data() : out->data();
      const algos::Topology topo = HostsFor(c.algo, n);
      CHORUS_RETURN_IF_ERROR(timed(
          c.algo == Algo::kAllReduceRing ? algos::AllReduceRing(ctx, in->data(), dst, count, t, c.op, tuning)
          : c.algo == Algo::kAllReduceRd ? algos::AllReduceRecursiveDoubling(ctx, in->data(), dst, count, t, c.op)
          : c.algo == Algo::kAllReduceRabenseifner ? algos::AllReduceRabenseifner(ctx, in->data(), dst, count, t, c.op)
          : c.algo == Algo::kAllReduceTree
              ? algos::AllReduceTree(ctx, in->data(), dst, count, t, c.op, tuning)
              : algos::AllReduceHierarchical(ctx, topo, in->data(), dst, count, t, c.op, tuning)));
      if (!c.in_place) CHORUS_RETURN_IF_ERROR(CheckReductionInputKept(c, rank, *in));
      *result = std::move(c.in_place ? in : out);
      // Each rank checks a slice against the reference (so the ranks' threads share
      // the work); the caller then compares every rank's result with rank 0's.
      const size_t first = count * rank / n_sz, last = count * (rank + 1) / n_sz;
      return AtRank(rank, "result", CheckReduction(t, c.op, seed, n, first, last - first, (*result)->at(first)));
    }
    case Algo::kBroadcast:
    case Algo::kBroadcastChain:
    case Algo::kBroadcastScatterAllGather:
    case Algo::kBroadcastHierarchical: {
      // The tree and the chain also out of place: the root's input in `send`.
      const bool out_of_place = !c.in_place && (c.algo == Algo::kBroadcast || c.algo == Algo::kBroadcastChain);
      TypedBuffer buf(t, count), send(t, out_of_place && rank == c.root ? count : 0);
      buf.Poison();
      if (rank == c.root) FillBytes(seed, c.root, 0, bytes, out_of_place ? send.data() : buf.data());
      const void* from = out_of_place && rank == c.root ? send.data() : buf.data();
      const algos::Topology topo = HostsFor(c.algo, n);
      Status st;
      switch (c.algo) {
        case Algo::kBroadcastChain: st = algos::BroadcastChain(ctx, from, buf.data(), count, t, c.root, tuning); break;
        case Algo::kBroadcastScatterAllGather:
          st = algos::BroadcastScatterAllGather(ctx, buf.data(), count, t, c.root, tuning);
          break;
        case Algo::kBroadcastHierarchical:
          st = algos::BroadcastHierarchical(ctx, topo, buf.data(), count, t, c.root, tuning);
          break;
        default: st = algos::BroadcastTree(ctx, from, buf.data(), count, t, c.root, tuning); break;
      }
      CHORUS_RETURN_IF_ERROR(timed(st));
      if (send.count() > 0)
        CHORUS_RETURN_IF_ERROR(AtRank(rank, "send", CheckBytes(seed, c.root, 0, bytes, send.data())));
      return AtRank(rank, "buffer", CheckBytes(seed, c.root, 0, bytes, buf.data()));
    }
    case Algo::kReduce:
    case Algo::kReduceHierarchical: {
      TypedBuffer in(t, count), out(t, count);
      FillReductionInput(t, c.op, seed, rank, 0, count, in.data());
      out.Poison();
      const bool root = rank == c.root;
      // Non-roots pass no recv buffer at all: it must not be touched.
      void* dst = !root ? nullptr : c.in_place ? in.data() : out.data();
      const algos::Topology topo = HostsFor(c.algo, n);
      CHORUS_RETURN_IF_ERROR(
          timed(c.algo == Algo::kReduceHierarchical
                    ? algos::ReduceHierarchical(ctx, topo, in.data(), dst, count, t, c.op, c.root, tuning)
                    : algos::ReduceTree(ctx, in.data(), dst, count, t, c.op, c.root, tuning)));
      if (!root || !c.in_place) CHORUS_RETURN_IF_ERROR(CheckReductionInputKept(c, rank, in));
      if (!root) return Status::Ok();
      return AtRank(rank, "result", CheckReduction(t, c.op, seed, n, 0, count, dst));
    }
    case Algo::kAllGather:
    case Algo::kAllGatherRd:
    case Algo::kAllGatherHierarchical: {
      TypedBuffer in(t, count), out(t, n_sz * count);
      out.Poison();
      // In place: our block already sits at its place in recv.
      char* src = c.in_place ? out.at(rank * count) : in.at(0);
      FillBytes(seed, rank, 0, bytes, src);
      const algos::Topology topo = HostsFor(c.algo, n);
      CHORUS_RETURN_IF_ERROR(timed(c.algo == Algo::kAllGatherRd
                                       ? algos::AllGatherRecursiveDoubling(ctx, src, out.data(), count, t)
                                   : c.algo == Algo::kAllGatherHierarchical
                                       ? algos::AllGatherHierarchical(ctx, topo, src, out.data(), count, t, tuning)
                                       : algos::AllGatherRing(ctx, src, out.data(), count, t, tuning)));
      if (!c.in_place && c.check_send) {
        CHORUS_RETURN_IF_ERROR(AtRank(rank, "send buffer", CheckBytes(seed, rank, 0, bytes, src)));
      }
      for (int j = 0; j < n; ++j) {
        CHORUS_RETURN_IF_ERROR(
            AtRank(rank, "block " + std::to_string(j), CheckBytes(seed, j, 0, bytes, out.at(j * count))));
      }
      return Status::Ok();
    }
    case Algo::kReduceScatter:
    case Algo::kReduceScatterHierarchical: {
      TypedBuffer in(t, n_sz * count), out(t, count);
      FillReductionInput(t, c.op, seed, rank, 0, n_sz * count, in.data());
      out.Poison();
      char* dst = c.in_place ? in.at(rank * count) : out.at(0);
      const algos::Topology topo = HostsFor(c.algo, n);
      CHORUS_RETURN_IF_ERROR(
          timed(c.algo == Algo::kReduceScatterHierarchical
                    ? algos::ReduceScatterHierarchical(ctx, topo, in.data(), dst, count, t, c.op, tuning)
                    : algos::ReduceScatterRing(ctx, in.data(), dst, count, t, c.op, tuning)));
      if (!c.in_place) CHORUS_RETURN_IF_ERROR(CheckReductionInputKept(c, rank, in));
      return AtRank(rank, "result", CheckReduction(t, c.op, seed, n, rank * count, count, dst));
    }
    case Algo::kGather: {
      const bool root = rank == c.root;
      TypedBuffer in(t, count), out(t, root ? n_sz * count : 0);
      out.Poison();
      char* src = root && c.in_place ? out.at(rank * count) : in.at(0);
      FillBytes(seed, rank, 0, bytes, src);
      CHORUS_RETURN_IF_ERROR(timed(algos::Gather(ctx, src, root ? out.data() : nullptr, count, t, c.root)));
      if ((!root || !c.in_place) && c.check_send) {
        CHORUS_RETURN_IF_ERROR(AtRank(rank, "send buffer", CheckBytes(seed, rank, 0, bytes, src)));
      }
      if (!root) return Status::Ok();
      for (int j = 0; j < n; ++j) {
        CHORUS_RETURN_IF_ERROR(
            AtRank(rank, "block " + std::to_string(j), CheckBytes(seed, j, 0, bytes, out.at(j * count))));
      }
      return Status::Ok();
    }
    case Algo::kScatter: {
      const bool root = rank == c.root;
      TypedBuffer in(t, root ? n_sz * count : 0), out(t, count);
      FillBytes(seed, c.root, 0, in.bytes(), in.data());
      out.Poison();
      char* dst = root && c.in_place ? in.at(rank * count) : out.at(0);
      CHORUS_RETURN_IF_ERROR(timed(algos::Scatter(ctx, root ? in.data() : nullptr, dst, count, t, c.root)));
      if (root && !c.in_place && c.check_send) {
        CHORUS_RETURN_IF_ERROR(AtRank(rank, "send buffer", CheckBytes(seed, rank, 0, in.bytes(), in.data())));
      }
      return AtRank(rank, "result", CheckBytes(seed, c.root, rank * bytes, bytes, dst));
    }
    case Algo::kAllToAll: {
      TypedBuffer in(t, n_sz * count), out(t, n_sz * count);
      FillBytes(seed, rank, 0, in.bytes(), in.data());
      out.Poison();
      char* dst = c.in_place ? in.at(0) : out.at(0);
      CHORUS_RETURN_IF_ERROR(timed(algos::AllToAllPairwise(ctx, in.data(), dst, count, t)));
      if (!c.in_place && c.check_send) {
        CHORUS_RETURN_IF_ERROR(AtRank(rank, "send buffer", CheckBytes(seed, rank, 0, in.bytes(), in.data())));
      }
      for (int j = 0; j < n; ++j) {
        // Block j came from rank j, which sent us block `rank` of its buffer.
        CHORUS_RETURN_IF_ERROR(
            AtRank(rank, "block " + std::to_string(j), CheckBytes(seed, j, rank * bytes, bytes, dst + j * bytes)));
      }
      return Status::Ok();
    }
  }
  return InternalError("unknown algorithm");
}

// all_reduce: every rank's result bit for bit against rank 0's (ranks must agree
// exactly, whatever the rounding); each rank checked a slice against the reference.
void CheckAllReduceResults(const Case& c, int n, const std::vector<std::unique_ptr<TypedBuffer>>& results) {
  if (results[0] == nullptr) return;
  for (int r = 1; r < n; ++r) {
    if (results[r] == nullptr) continue;
    Status same = CheckSameBytes(results[0]->data(), results[r]->data(), results[0]->bytes());
    EXPECT_TRUE(same.ok()) << c.Describe(n) << ": rank " << r << " vs rank 0: " << same.ToString();
  }
}

uint64_t FingerprintOf(const Case& c) {
  return algos::Fingerprint(CollectiveOf(c.algo), c.count, c.dtype, c.op, c.root);
}

// Runs one case on every rank; returns the slowest rank's time in the algorithm.
// Rank `late` (if any) starts `late_ms` after the others.
double RunCase(TcpWorld& world, const Case& c, int late = -1, int late_ms = 0) {
  const int n = world.size();
  std::vector<double> seconds(n, 0.0);
  std::vector<std::unique_ptr<TypedBuffer>> results(n);
  std::vector<Status> st = world.Run([&](int) { return FingerprintOf(c); },
                                     [&](int rank, const Context& ctx) {
                                       if (rank == late)
                                         std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
                                       return RankBody(c, n, rank, ctx, &results[rank], &seconds[rank]);
                                     });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(st[r].ok()) << c.Describe(n) << ": rank " << r << ": " << st[r].ToString();
  }
  CheckAllReduceResults(c, n, results);
  return *std::max_element(seconds.begin(), seconds.end());
}

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

class CollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
#ifdef CHORUS_SHM_WORLD
    Result<std::unique_ptr<TcpWorld>> w = TcpWorld::CreateShm(GetParam());
#else
    Result<std::unique_ptr<TcpWorld>> w = TcpWorld::Create(GetParam());
#endif
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    world_ = std::move(w.value());
  }

  void Run(const Case& c) { RunCase(*world_, c); }

  // The sweep for one algorithm (see the top of the file).
  void Sweep(Algo algo) {
    const int n = GetParam();
    const int a = static_cast<int>(algo);
    for (int ti = 0; ti < 8; ++ti) {
      const DataType t = kAllTypes[ti];
      const size_t es = DataTypeSize(t);
      // ~1 MiB per rank: for block collectives the per-rank block, so that the
      // whole buffer stays ~1 MiB too.
      const size_t big = (size_t{1} << 20) / es / (Blocks(algo) ? n : 1) + 3;
      const std::set<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), 1023, big};
      int ci = 0;
      for (size_t count : counts) {
        ++ci;
        std::vector<ReduceOp> ops = {ReduceOp::kSum};
        if (Reduces(algo)) {
          if (count == big || kSlowdown > 1) {
            ops = {kAllOps[(ti + ci + a) % 5]};
          } else {
            ops.assign(std::begin(kAllOps), std::end(kAllOps));
          }
        }
        int oi = 0;
        for (ReduceOp op : ops) {
          ++oi;
          // Chunks of one element for tiny counts; for 1023, chunks of a few elements
          // (every dtype, some of the ops) or of ~130; 64 KiB (many chunks per block)
          // for the large count. Sizes not multiples of es.
          size_t chunk_bytes = count <= 7 ? 1 : (64 << 10) + 5;
          if (count == 1023) chunk_bytes = (ti + oi) % 4 == 0 ? 7 * es + 3 : 130 * es + 3;
          for (bool in_place : {false, true}) {
            if (OneBuffer(algo) && in_place) continue;
            const int root = Rooted(algo) ? (ti + ci + oi + (in_place ? 1 : 0)) % n : 0;
            const uint64_t seed = SeedOf({static_cast<uint64_t>(a), static_cast<uint64_t>(n), static_cast<uint64_t>(t),
                                          static_cast<uint64_t>(op), count, in_place, static_cast<uint64_t>(root)});
            Run(Case{algo, t, op, count, in_place, root, chunk_bytes, seed});
            if (HasFailure()) return;
          }
        }
      }
    }
    // 16 MiB on every other world size (each algorithm gets 1, 3, 5 or 2, 4).
    if ((a + n) % 2 == 0) Huge(algo);
  }

  // 16 MiB per rank with the default chunk size, the size where pipelining matters:
  // one case, dtype, op, placement and root rotating with the algorithm and world size.
  // Prints the time (loopback, every rank on this machine's cores: a smoke number).
  void Huge(Algo algo) {
    const int n = GetParam();
    const int a = static_cast<int>(algo);
    const int k = (a + n) / 2;  // a + n is even here
    const DataType t = kAllTypes[(k + a) % 8];
    const ReduceOp op = Reduces(algo) ? kAllOps[(a + 2 * n) % 5] : ReduceOp::kSum;
    const bool in_place = !OneBuffer(algo) && k % 2 == 1;
    const int root = Rooted(algo) && n > 1 ? 1 + a % (n - 1) : 0;
    const size_t count = (size_t{16} << 20) / DataTypeSize(t) / (Blocks(algo) ? n : 1);
    Case c{algo,
           t,
           op,
           count,
           in_place,
           root,
           algos::Tuning().chunk_bytes,
           SeedOf({16, static_cast<uint64_t>(a), static_cast<uint64_t>(n)})};
    c.check_send = false;
    c.crowded_cores = n >= 3;  // broadcast's at 4 ranks, reduce's at 3 and 5
    const double seconds = RunCase(*world_, c);
    std::printf("%s: %.1f ms\n", c.Describe(n).c_str(), seconds * 1e3);
  }

  std::unique_ptr<TcpWorld> world_;
};

TEST_P(CollectivesTest, AllReduceRing) { Sweep(Algo::kAllReduceRing); }
TEST_P(CollectivesTest, AllReduceRecursiveDoubling) { Sweep(Algo::kAllReduceRd); }
TEST_P(CollectivesTest, AllReduceHierarchical) { Sweep(Algo::kAllReduceHierarchical); }
TEST_P(CollectivesTest, AllReduceRabenseifner) { Sweep(Algo::kAllReduceRabenseifner); }
TEST_P(CollectivesTest, AllReduceTree) { Sweep(Algo::kAllReduceTree); }
TEST_P(CollectivesTest, BroadcastTree) { Sweep(Algo::kBroadcast); }
TEST_P(CollectivesTest, BroadcastChain) { Sweep(Algo::kBroadcastChain); }
TEST_P(CollectivesTest, BroadcastScatterAllGather) { Sweep(Algo::kBroadcastScatterAllGather); }
TEST_P(CollectivesTest, BroadcastHierarchical) { Sweep(Algo::kBroadcastHierarchical); }
TEST_P(CollectivesTest, AllGatherHierarchical) { Sweep(Algo::kAllGatherHierarchical); }
TEST_P(CollectivesTest, ReduceHierarchical) { Sweep(Algo::kReduceHierarchical); }
TEST_P(CollectivesTest, ReduceScatterHierarchical) { Sweep(Algo::kReduceScatterHierarchical); }
TEST_P(CollectivesTest, ReduceTree) { Sweep(Algo::kReduce); }
TEST_P(CollectivesTest, AllGatherRing) { Sweep(Algo::kAllGather); }
TEST_P(CollectivesTest, AllGatherRecursiveDoubling) {
  const int n = GetParam();
  if ((n & (n - 1)) != 0) GTEST_SKIP() << "recursive doubling all_gather needs a power-of-two world";
  Sweep(Algo::kAllGatherRd);
}
TEST_P(CollectivesTest, ReduceScatterRing) { Sweep(Algo::kReduceScatter); }
TEST_P(CollectivesTest, Gather) { Sweep(Algo::kGather); }
TEST_P(CollectivesTest, Scatter) { Sweep(Algo::kScatter); }
TEST_P(CollectivesTest, AllToAllPairwise) { Sweep(Algo::kAllToAll); }

// Barrier: no rank leaves round k before every rank has arrived at it. One rank
// (a different one each round) arrives late, so the others really have to wait.
TEST_P(CollectivesTest, Barrier) {
  const int n = GetParam();
  const uint64_t fp = algos::Fingerprint(Collective::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, 0);
  for (int round = 0; round < 12; ++round) {
    std::atomic<int> arrived{0};
    const int late = round % n;
    std::vector<Status> st =
        world_->Run([&](int) { return fp; },
                    [&](int rank, const Context& ctx) {
                      if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                      arrived.fetch_add(1);
                      CHORUS_RETURN_IF_ERROR(algos::Barrier(ctx));
                      const int seen = arrived.load();
                      if (seen != n) {
                        return InternalError("rank " + std::to_string(rank) + " left after " + std::to_string(seen) +
                                             " of " + std::to_string(n) + " ranks arrived");
                      }
                      return Status::Ok();
                    });
    for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << "round " << round << ": " << st[r].ToString();
  }
}

// Broadcast and reduce tag each chunk with its index as the step, which is 16 bits:
// past 65536 chunks the tags wrap and matching relies on FIFO order per (peer, tag).
// (A sender far ahead of its receiver must not make the receiver quadratic: the
// engine's per-call fingerprint check is a map lookup, not a scan.)
TEST_P(CollectivesTest, MoreThan65536ChunksWrapTheStepTags) {
  const int n = GetParam();
  if (n != 3) GTEST_SKIP() << "run on 3 ranks only (root, inner node, leaf), to save time";
#ifdef CHORUS_TEST_TSAN
  GTEST_SKIP() << "tag arithmetic, not threading: 70001 one-byte steps are too slow under TSan";
#endif
  for (Algo algo : {Algo::kBroadcast, Algo::kReduce}) {
    const uint64_t seed = SeedOf({65536, static_cast<uint64_t>(algo)});
    RunCase(*world_, Case{algo, DataType::kUint8, ReduceOp::kMax, 70001, false, 1, 1, seed});
  }
}

// The algorithms take their scratch from the rank's cache and give it back: a call
// repeated finds its scratch there (no new allocations, so no fresh pages to fault
// in), and gets the right result from memory that held the previous call's data.
TEST_P(CollectivesTest, RepeatedCallsReuseTheirScratch) {
  const int n = GetParam();
  if (n < 2) GTEST_SKIP() << "one rank needs no scratch";
  // The algorithms that take scratch: partial sums (reduce-scatter, reduce), the
  // in-place ring's window, recursive doubling's incoming buffer, in-place all-to-all.
  const std::vector<Case> cases = {
      {Algo::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, 50000, false, 0, 4096, SeedOf({91, 1})},
      {Algo::kReduce, DataType::kInt32, ReduceOp::kMax, 50000, false, n - 1, 4096, SeedOf({91, 2})},
      {Algo::kAllReduceRing, DataType::kFloat64, ReduceOp::kSum, 50000, true, 0, 4096, SeedOf({91, 3})},
      {Algo::kAllReduceRd, DataType::kFloat16, ReduceOp::kMin, 3000, false, 0, 4096, SeedOf({91, 4})},
      {Algo::kAllToAll, DataType::kUint8, ReduceOp::kSum, 20000, true, 0, 4096, SeedOf({91, 5})},
  };
  auto gets = [&](int r) { return world_->scratch(r).hits() + world_->scratch(r).misses(); };
  for (const Case& c : cases) {
    std::vector<size_t> gets_first(n), misses_first(n), hits_first(n);
    for (int r = 0; r < n; ++r) gets_first[r] = gets(r);
    RunCase(*world_, c);
    for (int r = 0; r < n; ++r) {
      gets_first[r] = gets(r) - gets_first[r];
      misses_first[r] = world_->scratch(r).misses();
      hits_first[r] = world_->scratch(r).hits();
    }
    Case again = c;
    again.seed = SeedOf({92, c.seed});  // other data in the same memory
    RunCase(*world_, again);
    size_t gets_total = 0, hits_total = 0;
    for (int r = 0; r < n; ++r) {
      const size_t misses_again = world_->scratch(r).misses() - misses_first[r];
      // A reduce-scatter rank may hold a few more chunks than the first time (how many
      // partial sums wait to be forwarded depends on timing), never most of them again.
      EXPECT_LE(misses_again, gets_first[r] / 2) << c.Describe(n) << ": rank " << r;
      gets_total += gets_first[r];
      hits_total += world_->scratch(r).hits() - hits_first[r];
    }
    EXPECT_GT(gets_total, 0u) << c.Describe(n) << ": no rank took scratch";
    EXPECT_GT(hits_total, 0u) << c.Describe(n) << ": nothing reused";
  }
}

// A rank that comes late finds no large message waiting for it in its transport
// (credits.h): the root of a gather or reduce, a receiver of a scatter or broadcast, one
// rank of an all-to-all or of a recursive-doubling all-gather. A reduce's children, and a broadcast's parent, send 2
// chunks unasked.
TEST_P(CollectivesTest, ALateRankFindsNoLargeMessagesWaiting) {
  const int n = GetParam();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  constexpr size_t kChunk = 64 << 10;
  const size_t block = algos::kCreditAtBytes / 4 + 5;  // floats: blocks just above the credit size
  struct Late {
    Case c;
    int late;
    size_t allowed_bytes;
  };
  const std::vector<Late> runs = {
      {{Algo::kGather, DataType::kFloat32, ReduceOp::kSum, block, false, n - 1, kChunk, SeedOf({93, 1})}, n - 1, 0},
      {{Algo::kScatter, DataType::kFloat32, ReduceOp::kSum, block, false, 0, kChunk, SeedOf({93, 2})}, n - 1, 0},
      {{Algo::kAllToAll, DataType::kFloat32, ReduceOp::kSum, block, false, 0, kChunk, SeedOf({93, 3})}, n / 2, 0},
      {{Algo::kReduce, DataType::kFloat32, ReduceOp::kSum, 4 << 20, false, 0, kChunk, SeedOf({93, 4})},
       0,
       2 * kChunk * static_cast<size_t>(n - 1)},
      {{Algo::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 4 << 20, false, 0, kChunk, SeedOf({93, 5})},
       n - 1,
       2 * kChunk},
      {{Algo::kBroadcastChain, DataType::kFloat32, ReduceOp::kSum, 4 << 20, false, 0, kChunk, SeedOf({93, 6})},
       n - 1,
       2 * kChunk},
      {{Algo::kAllGatherRd, DataType::kFloat32, ReduceOp::kSum, block, false, 0, kChunk, SeedOf({93, 7})}, n - 1, 0},
  };
  for (const Late& l : runs) {
    if (l.c.algo == Algo::kAllGatherRd && (n & (n - 1)) != 0) continue;  // a power of two only
    const uint64_t before = world_->transport(l.late).counters().early_bytes;
    RunCase(*world_, l.c, l.late, 100);
    const uint64_t early = world_->transport(l.late).counters().early_bytes - before;
    EXPECT_LE(early, l.allowed_bytes) << l.c.Describe(n) << ": rank " << l.late << " came 100 ms late";
  }
}

// Every algorithm at once on the same transports: on each rank one thread per
// collective, each with its own sequence number (tag space), small chunks so that
// their messages interleave on every connection. Tags must keep them apart.
TEST_P(CollectivesTest, ConcurrentCallsOnOneTransport) {
  const int n = GetParam();
  const Algo algos_all[] = {Algo::kAllReduceRing,
                            Algo::kAllReduceRd,
                            Algo::kBroadcast,
                            Algo::kReduce,
                            Algo::kAllGather,
                            Algo::kReduceScatter,
                            Algo::kGather,
                            Algo::kScatter,
                            Algo::kAllToAll,
                            Algo::kAllReduceRabenseifner,
                            Algo::kBroadcastScatterAllGather,
                            Algo::kAllReduceTree,
                            Algo::kBroadcastHierarchical,
                            Algo::kAllGatherHierarchical,
                            Algo::kReduceHierarchical,
                            Algo::kReduceScatterHierarchical};
  for (int round = 0; round < 3; ++round) {
    std::vector<Case> cases;
    for (int j = 0; j < static_cast<int>(std::size(algos_all)); ++j) {
      const DataType t = kAllTypes[(j + 3 * round) % 8];
      const size_t count = std::vector<size_t>{5, 1023, 30001}[(j + round) % 3];
      const int root = n - 1 - (j + round) % n;
      const uint64_t seed =
          SeedOf({77, static_cast<uint64_t>(n), static_cast<uint64_t>(round), static_cast<uint64_t>(j)});
      cases.push_back(Case{algos_all[j], t, kAllOps[(j + round) % 5], count, (j + round) % 2 == 1, root,
                           DataTypeSize(t) * 97 + 1, seed});
      if (OneBuffer(cases.back().algo)) cases.back().in_place = false;
    }
    const uint64_t base = world_->ReserveSeqs(cases.size());
    std::vector<std::vector<std::unique_ptr<TypedBuffer>>> results(cases.size());
    for (auto& r : results) r.resize(n);
    std::vector<Status> st =
        world_->Run([&](int) { return uint64_t{0}; },
                    [&](int rank, const Context& ctx) {
                      std::vector<Status> each(cases.size());
                      std::vector<std::thread> threads;
                      for (size_t j = 0; j < cases.size(); ++j) {
                        threads.emplace_back([&, j] {
                          Context mine{ctx.transport, base + j, FingerprintOf(cases[j]), ctx.deadline};
                          mine.scratch = ctx.scratch;  // one cache, used by every thread at once
                          double seconds = 0;
                          each[j] = RankBody(cases[j], n, rank, mine, &results[j][rank], &seconds);
                        });
                      }
                      for (std::thread& t : threads) t.join();
                      for (size_t j = 0; j < cases.size(); ++j) {
                        if (!each[j].ok()) return each[j].WithContext(cases[j].Describe(n));
                      }
                      return Status::Ok();
                    });
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(st[r].ok()) << "round " << round << ": rank " << r << ": " << st[r].ToString();
    for (size_t j = 0; j < cases.size(); ++j) CheckAllReduceResults(cases[j], n, results[j]);
  }
}

#ifndef CHORUS_SHM_WORLD  // a TCP setting
// Every algorithm with every non-empty message sent by rendezvous (its data waits for
// the receiver's posted Recv): what a TCP peer does while it is told to PAUSE, and
// what RDMA does above its eager size. No schedule may wait on a send before posting
// the receives its peers' sends wait for.
TEST(CollectivesRendezvous, EveryAlgorithmCompletesWithEveryMessageByRendezvous) {
  transport::TcpOptions strict;
  strict.rendezvous_all_from = 1;
  const Algo algos_all[] = {Algo::kAllReduceRing,
                            Algo::kAllReduceRd,
                            Algo::kAllReduceHierarchical,
                            Algo::kBroadcast,
                            Algo::kBroadcastChain,
                            Algo::kReduce,
                            Algo::kAllGather,
                            Algo::kAllGatherRd,
                            Algo::kReduceScatter,
                            Algo::kGather,
                            Algo::kScatter,
                            Algo::kAllToAll,
                            Algo::kAllReduceRabenseifner,
                            Algo::kBroadcastScatterAllGather,
                            Algo::kAllReduceTree,
                            Algo::kBroadcastHierarchical,
                            Algo::kAllGatherHierarchical,
                            Algo::kReduceHierarchical,
                            Algo::kReduceScatterHierarchical};
  for (int n : {2, 3, 4}) {
    Result<std::unique_ptr<TcpWorld>> w = TcpWorld::Create(n, size_t{64} << 20, strict);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (Algo a : algos_all) {
      if (a == Algo::kAllGatherRd && n == 3) continue;  // a power of two only
      for (size_t count : {size_t{1}, size_t{1023}, size_t{100003}}) {
        for (bool in_place : {false, true}) {
          if (OneBuffer(a) && in_place) continue;
          const uint64_t seed = SeedOf({94, static_cast<uint64_t>(a), count, static_cast<uint64_t>(n), in_place});
          RunCase(**w, Case{a, DataType::kFloat32, ReduceOp::kSum, count, in_place, n - 1, 16 << 10, seed});
        }
      }
    }
    const uint64_t fp = algos::Fingerprint(Collective::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, 0);
    std::vector<Status> st =
        (*w)->Run([&](int) { return fp; }, [](int, const Context& ctx) { return algos::Barrier(ctx); });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "barrier rank " << r << ": " << st[r].ToString();
    // And so no byte ever waited in a transport for its receive.
    for (int r = 0; r < n; ++r) EXPECT_EQ((*w)->transport(r).counters().early_bytes, 0u) << "rank " << r;
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

// Rabenseifner's halving and folding past 5 ranks: 6 and 7 fold 2 and 3 extra ranks
// into a power of two of 4 (uneven blocks of 4), 8 halves three times without a fold.
class LargerWorldsTest : public CollectivesTest {};
TEST_P(LargerWorldsTest, AllReduceRabenseifner) { Sweep(Algo::kAllReduceRabenseifner); }
// The double binary tree's third level (n >= 7) and mirrored trees of different shapes.
TEST_P(LargerWorldsTest, AllReduceTree) { Sweep(Algo::kAllReduceTree); }
// The scatter's binomial subtrees past 5 ranks: cut short at 6 and 7, whole at 8.
TEST_P(LargerWorldsTest, BroadcastScatterAllGather) { Sweep(Algo::kBroadcastScatterAllGather); }
// The hierarchical ones on three hosts of two (6), hosts of 4 and 3 (7), two of four (8).
TEST_P(LargerWorldsTest, BroadcastHierarchical) { Sweep(Algo::kBroadcastHierarchical); }
TEST_P(LargerWorldsTest, AllGatherHierarchical) { Sweep(Algo::kAllGatherHierarchical); }
TEST_P(LargerWorldsTest, ReduceHierarchical) { Sweep(Algo::kReduceHierarchical); }
TEST_P(LargerWorldsTest, ReduceScatterHierarchical) { Sweep(Algo::kReduceScatterHierarchical); }
INSTANTIATE_TEST_SUITE_P(WorldSizes, LargerWorldsTest, ::testing::Values(6, 7, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::testing
