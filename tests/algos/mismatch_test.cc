// Ranks that call different collectives (or the same one with a different count,
// dtype or root) must get an error naming both calls, promptly, never a hang or
// silently wrong data.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "algos/agreement.h"
#include "algos/barrier.h"
#include "algos/collectives.h"
#include "algos/fingerprint.h"
#include "algos/selector.h"
#include "tests/algos/tcp_world.h"

namespace chorus::testing {
namespace {

using algos::Collective;
using algos::Context;
using algos::Fingerprint;

constexpr int64_t kDeadlineMs = 10000;

// What one rank calls: its fingerprint and the algorithm run with it.
struct Call {
  uint64_t fingerprint;
  std::function<Status(const Context&)> run;
};

Call AllReduceRingCall(size_t count, DataType t = DataType::kFloat32) {
  return Call{Fingerprint(Collective::kAllReduce, count, t, ReduceOp::kSum, 0), [count, t](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(in.size());
                return algos::AllReduceRing(ctx, in.data(), out.data(), count, t, ReduceOp::kSum, algos::Tuning());
              }};
}
Call AllReduceRdCall(size_t count) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kAllReduce, count, t, ReduceOp::kSum, 0), [count, t](const Context& ctx) {
                std::vector<char> buf(count * DataTypeSize(t) + 1);
                return algos::AllReduceRecursiveDoubling(ctx, buf.data(), buf.data(), count, t, ReduceOp::kSum);
              }};
}
Call AllReduceTreeCall(size_t count) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kAllReduce, count, t, ReduceOp::kSum, 0), [count, t](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(in.size());
                return algos::AllReduceTree(ctx, in.data(), out.data(), count, t, ReduceOp::kSum, algos::Tuning());
              }};
}
Call BroadcastCall(size_t count, int root) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kBroadcast, count, t, ReduceOp::kSum, root), [=](const Context& ctx) {
                std::vector<char> buf(count * DataTypeSize(t) + 1);
                return algos::BroadcastTree(ctx, buf.data(), buf.data(), count, t, root, algos::Tuning());
              }};
}
Call ScatterAllGatherCall(size_t count, int root) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kBroadcast, count, t, ReduceOp::kSum, root), [=](const Context& ctx) {
                std::vector<char> buf(count * DataTypeSize(t) + 1);
                return algos::BroadcastScatterAllGather(ctx, buf.data(), count, t, root, algos::Tuning());
              }};
}
Call ReduceCall(size_t count, int root) {
  const DataType t = DataType::kInt32;
  return Call{Fingerprint(Collective::kReduce, count, t, ReduceOp::kMax, root), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(in.size());
                return algos::ReduceTree(ctx, in.data(), out.data(), count, t, ReduceOp::kMax, root, algos::Tuning());
              }};
}
Call AllGatherCall(size_t count, DataType t) {
  return Call{Fingerprint(Collective::kAllGather, count, t, ReduceOp::kSum, 0), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(ctx.size() * in.size());
                return algos::AllGatherRing(ctx, in.data(), out.data(), count, t, algos::Tuning());
              }};
}

// The hierarchical ones on two hosts, ranks r % 2 on host r % 2 (so neither is a rank range).
algos::Topology TwoHosts(int n) {
  std::vector<std::string> hosts;
  for (int r = 0; r < n; ++r) hosts.push_back(std::to_string(r % 2));
  return algos::Topology::FromHostIds(hosts);
}
Call HierarchicalBroadcastCall(size_t count, int root) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kBroadcast, count, t, ReduceOp::kSum, root), [=](const Context& ctx) {
                std::vector<char> buf(count * DataTypeSize(t) + 1);
                return algos::BroadcastHierarchical(ctx, TwoHosts(ctx.size()), buf.data(), count, t, root,
                                                    algos::Tuning());
              }};
}
Call HierarchicalAllGatherCall(size_t count, DataType t) {
  return Call{Fingerprint(Collective::kAllGather, count, t, ReduceOp::kSum, 0), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(ctx.size() * in.size());
                return algos::AllGatherHierarchical(ctx, TwoHosts(ctx.size()), in.data(), out.data(), count, t,
                                                    algos::Tuning());
              }};
}
Call HierarchicalReduceCall(size_t count, int root) {
  const DataType t = DataType::kInt32;
  return Call{Fingerprint(Collective::kReduce, count, t, ReduceOp::kMax, root), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(in.size());
                return algos::ReduceHierarchical(ctx, TwoHosts(ctx.size()), in.data(), out.data(), count, t,
                                                 ReduceOp::kMax, root, algos::Tuning());
              }};
}
Call HierarchicalReduceScatterCall(size_t count, DataType t) {
  return Call{Fingerprint(Collective::kReduceScatter, count, t, ReduceOp::kSum, 0), [=](const Context& ctx) {
                std::vector<char> in(ctx.size() * (count * DataTypeSize(t) + 1)), out(count * DataTypeSize(t) + 1);
                return algos::ReduceScatterHierarchical(ctx, TwoHosts(ctx.size()), in.data(), out.data(), count, t,
                                                        ReduceOp::kSum, algos::Tuning());
              }};
}

Call AllReduceRingOpCall(size_t count, ReduceOp op) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kAllReduce, count, t, op, 0), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(in.size());
                return algos::AllReduceRing(ctx, in.data(), out.data(), count, t, op, algos::Tuning());
              }};
}
Call GatherCall(size_t count, int root) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kGather, count, t, ReduceOp::kSum, root), [=](const Context& ctx) {
                std::vector<char> in(count * DataTypeSize(t) + 1), out(ctx.size() * in.size());
                return algos::Gather(ctx, in.data(), out.data(), count, t, root);
              }};
}
Call ScatterCall(size_t count, int root) {
  const DataType t = DataType::kFloat32;
  return Call{Fingerprint(Collective::kScatter, count, t, ReduceOp::kSum, root), [=](const Context& ctx) {
                std::vector<char> in(ctx.size() * (count * DataTypeSize(t) + 1)), out(count * DataTypeSize(t) + 1);
                return algos::Scatter(ctx, in.data(), out.data(), count, t, root);
              }};
}
Call AllToAllCall(size_t count) {
  const DataType t = DataType::kInt64;
  return Call{Fingerprint(Collective::kAllToAll, count, t, ReduceOp::kSum, 0), [=](const Context& ctx) {
                std::vector<char> in(ctx.size() * count * DataTypeSize(t) + 1), out(in.size());
                return algos::AllToAllPairwise(ctx, in.data(), out.data(), count, t);
              }};
}
Call ReduceScatterCall(size_t count, DataType t) {
  return Call{Fingerprint(Collective::kReduceScatter, count, t, ReduceOp::kSum, 0), [=](const Context& ctx) {
                std::vector<char> in(ctx.size() * count * DataTypeSize(t) + 1), out(count * DataTypeSize(t) + 1);
                return algos::ReduceScatterRing(ctx, in.data(), out.data(), count, t, ReduceOp::kSum, algos::Tuning());
              }};
}
Call BarrierCall() {
  return Call{Fingerprint(Collective::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, 0),
              [](const Context& ctx) { return algos::Barrier(ctx); }};
}

struct Outcome {
  std::vector<Status> status;
  double seconds;
};

// `shm`: the ranks over shared memory instead of TCP.
Outcome RunCalls(const std::vector<Call>& calls, int64_t deadline_ms = kDeadlineMs, bool shm = false) {
  const int n = static_cast<int>(calls.size());
  Result<std::unique_ptr<TcpWorld>> w = shm ? TcpWorld::CreateShm(n) : TcpWorld::Create(n);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return Outcome{};
  auto start = std::chrono::steady_clock::now();
  std::vector<Status> st =
      w.value()->Run([&](int rank) { return calls[rank].fingerprint; },
                     [&](int rank, const Context& ctx) { return calls[rank].run(ctx); }, deadline_ms);
  return Outcome{st, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Some rank reports kMismatch naming both calls; it happens long before the deadline.
void ExpectMismatchNaming(const Outcome& o, const std::string& a, const std::string& b) {
  ASSERT_FALSE(o.status.empty());
  bool found = false;
  std::string all;
  for (size_t r = 0; r < o.status.size(); ++r) {
    all += "\n  rank " + std::to_string(r) + ": " + o.status[r].ToString();
    const std::string& m = o.status[r].message();
    if (o.status[r].code() == StatusCode::kMismatch && m.find(a) != std::string::npos &&
        m.find(b) != std::string::npos) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << "no rank reported a mismatch naming \"" << a << "\" and \"" << b << "\":" << all;
  EXPECT_LT(o.seconds, kDeadlineMs / 1000.0 / 2) << "mismatch took too long to surface:" << all;
}

TEST(MismatchTest, AllReduceRingCountsDiffer) {
  Outcome o = RunCalls({AllReduceRingCall(10), AllReduceRingCall(11)});
  ExpectMismatchNaming(o, "all_reduce(count=10, float32, sum)", "all_reduce(count=11, float32, sum)");
}

TEST(MismatchTest, AllReduceRingZeroCountAgainstNonZero) {
  // count 0 still exchanges (empty) messages, so the mismatch is seen, not waited out.
  Outcome o = RunCalls({AllReduceRingCall(5), AllReduceRingCall(0), AllReduceRingCall(5)});
  ExpectMismatchNaming(o, "all_reduce(count=0, float32, sum)", "all_reduce(count=5, float32, sum)");
}

TEST(MismatchTest, AllReduceRecursiveDoublingCountsDiffer) {
  Outcome o = RunCalls({AllReduceRdCall(10), AllReduceRdCall(10), AllReduceRdCall(10), AllReduceRdCall(11)});
  ExpectMismatchNaming(o, "all_reduce(count=10, float32, sum)", "all_reduce(count=11, float32, sum)");
}

// The odd rank out is a leaf of one tree and forwards in the other; count 0 still
// sends an empty chunk up each tree.
TEST(MismatchTest, AllReduceTreeCountsDiffer) {
  Outcome o = RunCalls({AllReduceTreeCall(10), AllReduceTreeCall(10), AllReduceTreeCall(10), AllReduceTreeCall(11)});
  ExpectMismatchNaming(o, "all_reduce(count=10, float32, sum)", "all_reduce(count=11, float32, sum)");
}

TEST(MismatchTest, AllReduceTreeZeroCountAgainstNonZero) {
  Outcome o = RunCalls({AllReduceTreeCall(5), AllReduceTreeCall(0), AllReduceTreeCall(5)});
  ExpectMismatchNaming(o, "all_reduce(count=0, float32, sum)", "all_reduce(count=5, float32, sum)");
}

TEST(MismatchTest, BroadcastAgainstAllReduce) {
  Outcome o = RunCalls({AllReduceRingCall(64), BroadcastCall(64, 0), BroadcastCall(64, 0)});
  ExpectMismatchNaming(o, "broadcast(count=64, float32, root=0)", "all_reduce(count=64, float32, sum)");
}

TEST(MismatchTest, ReduceCountsDiffer) {
  Outcome o = RunCalls({ReduceCall(100, 2), ReduceCall(100, 2), ReduceCall(99, 2)});
  ExpectMismatchNaming(o, "reduce(count=100, int32, max, root=2)", "reduce(count=99, int32, max, root=2)");
}

TEST(MismatchTest, AllGatherDtypesDiffer) {
  Outcome o = RunCalls({AllGatherCall(256, DataType::kFloat32), AllGatherCall(256, DataType::kInt32)});
  ExpectMismatchNaming(o, "all_gather(count=256, float32)", "all_gather(count=256, int32)");
}

// The hierarchical all_gather: the rank whose dtype differs is named by a peer of its
// host or of its rail.
TEST(MismatchTest, HierarchicalAllGatherDtypesDiffer) {
  Outcome o =
      RunCalls({HierarchicalAllGatherCall(256, DataType::kFloat32), HierarchicalAllGatherCall(256, DataType::kFloat32),
                HierarchicalAllGatherCall(256, DataType::kFloat32), HierarchicalAllGatherCall(256, DataType::kInt32)});
  ExpectMismatchNaming(o, "all_gather(count=256, float32)", "all_gather(count=256, int32)");
}

// The hierarchical reduce_scatter: a rank whose dtype or count differs is named by a
// peer of its host or of its rail.
TEST(MismatchTest, HierarchicalReduceScatterDtypesOrCountsDiffer) {
  Outcome o = RunCalls(
      {HierarchicalReduceScatterCall(256, DataType::kFloat32), HierarchicalReduceScatterCall(256, DataType::kFloat32),
       HierarchicalReduceScatterCall(256, DataType::kFloat32), HierarchicalReduceScatterCall(256, DataType::kInt32)});
  ExpectMismatchNaming(o, "reduce_scatter(count=256, float32, sum)", "reduce_scatter(count=256, int32, sum)");
  o = RunCalls(
      {HierarchicalReduceScatterCall(256, DataType::kFloat32), HierarchicalReduceScatterCall(255, DataType::kFloat32),
       HierarchicalReduceScatterCall(256, DataType::kFloat32), HierarchicalReduceScatterCall(256, DataType::kFloat32)});
  ExpectMismatchNaming(o, "reduce_scatter(count=256, float32, sum)", "reduce_scatter(count=255, float32, sum)");
}

TEST(MismatchTest, AllReduceOpsDiffer) {
  Outcome o = RunCalls({AllReduceRingOpCall(64, ReduceOp::kSum), AllReduceRingOpCall(64, ReduceOp::kMax),
                        AllReduceRingOpCall(64, ReduceOp::kSum)});
  ExpectMismatchNaming(o, "all_reduce(count=64, float32, sum)", "all_reduce(count=64, float32, max)");
}

TEST(MismatchTest, GatherAgainstScatter) {
  // Rank 1 is scatter's root, so its message reaches gather's root, rank 0.
  Outcome o = RunCalls({GatherCall(32, 0), ScatterCall(32, 1)});
  ExpectMismatchNaming(o, "gather(count=32, float32, root=0)", "scatter(count=32, float32, root=1)");
}

TEST(MismatchTest, AllToAllCountsDiffer) {
  Outcome o = RunCalls({AllToAllCall(9), AllToAllCall(9), AllToAllCall(8)});
  ExpectMismatchNaming(o, "all_to_all(count=9, int64)", "all_to_all(count=8, int64)");
}

TEST(MismatchTest, ReduceScatterDtypesDiffer) {
  Outcome o = RunCalls({ReduceScatterCall(100, DataType::kFloat16), ReduceScatterCall(100, DataType::kBFloat16)});
  ExpectMismatchNaming(o, "reduce_scatter(count=100, float16, sum)", "reduce_scatter(count=100, bfloat16, sum)");
}

TEST(MismatchTest, BarrierAgainstAllReduce) {
  Outcome o = RunCalls({BarrierCall(), AllReduceRdCall(4), BarrierCall()});
  ExpectMismatchNaming(o, "barrier()", "all_reduce(count=4, float32, sum)");
}

TEST(MismatchTest, BroadcastCountsDifferWithNonZeroRoot) {
  Outcome o =
      RunCalls({BroadcastCall(1000, 2), BroadcastCall(1000, 2), BroadcastCall(1001, 2), BroadcastCall(1000, 2)});
  ExpectMismatchNaming(o, "broadcast(count=1000, float32, root=2)", "broadcast(count=1001, float32, root=2)");
}

// The scatter-allgather broadcast: a rank whose count differs is named by the first peer
// that exchanges a block with it (the scatter's parent or a ring neighbour).
TEST(MismatchTest, ScatterAllGatherBroadcastCountsDiffer) {
  Outcome o = RunCalls({ScatterAllGatherCall(1000, 1), ScatterAllGatherCall(1000, 1), ScatterAllGatherCall(1000, 1),
                        ScatterAllGatherCall(1001, 1), ScatterAllGatherCall(1000, 1)});
  ExpectMismatchNaming(o, "broadcast(count=1000, float32, root=1)", "broadcast(count=1001, float32, root=1)");
}

// Ranks configured to run all_reduce with different algorithms (one forces ring,
// the others pick recursive doubling) present the same fingerprint, so nothing names
// the cause; the schedules do not line up and the call ends at the deadline. What
// must never happen is a rank reporting success with wrong data.
TEST(MismatchTest, MixedAllReduceAlgorithmsNeverGiveWrongData) {
  const size_t count = 5;
  const DataType t = DataType::kInt32;
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(count, -1));
  std::vector<Call> calls;
  for (int r = 0; r < 3; ++r) {
    calls.push_back(Call{
        Fingerprint(Collective::kAllReduce, count, t, ReduceOp::kSum, 0), [&, r](const Context& ctx) {
          std::vector<int32_t> in(count, r + 1);
          return r == 0 ? algos::AllReduceRing(ctx, in.data(), out[r].data(), count, t, ReduceOp::kSum, algos::Tuning())
                        : algos::AllReduceRecursiveDoubling(ctx, in.data(), out[r].data(), count, t, ReduceOp::kSum);
        }});
  }
  Outcome o = RunCalls(calls, /*deadline_ms=*/500);
  ASSERT_EQ(o.status.size(), 3u);
  int failed = 0;
  for (int r = 0; r < 3; ++r) {
    if (!o.status[r].ok()) {
      ++failed;
      continue;
    }
    for (int32_t v : out[r]) EXPECT_EQ(v, 1 + 2 + 3) << "rank " << r << " succeeded with wrong data";
  }
  EXPECT_GE(failed, 1);
  EXPECT_LT(o.seconds, 5.0);
}

// What Dispatch runs for a rooted call: the agreement on the call, then the algorithm.
Call Agreed(const Call& c) {
  return Call{c.fingerprint, [run = c.run](const Context& ctx) -> Status {
                CHORUS_RETURN_IF_ERROR(algos::AgreeOnCall(ctx));
                return run(ctx);
              }};
}

// Every rank reports kMismatch naming its own call and another rank's, long before the
// deadline.
void ExpectMismatchOnEveryRank(const std::vector<Call>& calls, bool shm = false) {
  Outcome o = RunCalls(calls, kDeadlineMs, shm);
  ASSERT_EQ(o.status.size(), calls.size());
  std::string all;
  for (size_t r = 0; r < o.status.size(); ++r) all += "\n  rank " + std::to_string(r) + ": " + o.status[r].ToString();
  for (size_t r = 0; r < o.status.size(); ++r) {
    const std::string& m = o.status[r].message();
    const std::string mine = algos::DescribeFingerprint(calls[r].fingerprint);
    bool other = false;
    for (const Call& c : calls) {
      const std::string d = algos::DescribeFingerprint(c.fingerprint);
      other = other || (d != mine && m.find(d) != std::string::npos);
    }
    EXPECT_EQ(o.status[r].code(), StatusCode::kMismatch) << "rank " << r << all;
    EXPECT_NE(m.find("rank " + std::to_string(r) + " called " + mine), std::string::npos) << "rank " << r << all;
    EXPECT_TRUE(other) << "rank " << r << " names no other call" << all;
  }
  EXPECT_LT(o.seconds, kDeadlineMs / 1000.0 / 2) << "mismatch took too long to surface:" << all;
}

// Two ranks that each believe they are the root of a broadcast both only send: without
// the agreement both returned OK holding different data.
TEST(MismatchTest, AgreedBroadcastRootsDisagree) {
  ExpectMismatchOnEveryRank({Agreed(BroadcastCall(64, 0)), Agreed(BroadcastCall(64, 1))});
}

// The hierarchical broadcast after the agreement, as Dispatch runs it: roots that differ
// (on another host, on the same host; ranks that would never hear from each other)
// fail on every rank.
TEST(MismatchTest, AgreedHierarchicalBroadcastRootsDisagree) {
  ExpectMismatchOnEveryRank({Agreed(HierarchicalBroadcastCall(4096, 0)), Agreed(HierarchicalBroadcastCall(4096, 0)),
                             Agreed(HierarchicalBroadcastCall(4096, 0)), Agreed(HierarchicalBroadcastCall(4096, 1))});
  ExpectMismatchOnEveryRank({Agreed(HierarchicalBroadcastCall(4096, 0)), Agreed(HierarchicalBroadcastCall(4096, 2)),
                             Agreed(HierarchicalBroadcastCall(4096, 2)), Agreed(HierarchicalBroadcastCall(4096, 2))});
}

// The hierarchical reduce likewise: roots on different hosts, on the same host, and a
// count that differs (ranks whose bridges differ would never hear from each other).
TEST(MismatchTest, AgreedHierarchicalReduceRootsDisagree) {
  ExpectMismatchOnEveryRank({Agreed(HierarchicalReduceCall(4096, 0)), Agreed(HierarchicalReduceCall(4096, 0)),
                             Agreed(HierarchicalReduceCall(4096, 0)), Agreed(HierarchicalReduceCall(4096, 1))});
  ExpectMismatchOnEveryRank({Agreed(HierarchicalReduceCall(4096, 0)), Agreed(HierarchicalReduceCall(4096, 2)),
                             Agreed(HierarchicalReduceCall(4096, 2)), Agreed(HierarchicalReduceCall(4096, 2))});
  ExpectMismatchOnEveryRank({Agreed(HierarchicalReduceCall(4096, 3)), Agreed(HierarchicalReduceCall(4095, 3)),
                             Agreed(HierarchicalReduceCall(4096, 3)), Agreed(HierarchicalReduceCall(4096, 3))});
}

TEST(MismatchTest, AgreedScatterRootsDisagreeOnOneOfThree) {
  ExpectMismatchOnEveryRank({Agreed(ScatterCall(2, 0)), Agreed(ScatterCall(2, 0)), Agreed(ScatterCall(2, 1))});
}

// Rank 2 hears only from ranks that agree with it (1, then 0): it learns of rank 3 from
// rank 0's record (rank 0 learnt it when rank 3's message failed its first receive).
TEST(MismatchTest, AgreedReduceRootsLearntThroughAPeer) {
  ExpectMismatchOnEveryRank(
      {Agreed(ReduceCall(8, 0)), Agreed(ReduceCall(8, 0)), Agreed(ReduceCall(8, 0)), Agreed(ReduceCall(8, 3))});
}

TEST(MismatchTest, AgreedBroadcastCountsDisagreeOverShm) {
  ExpectMismatchOnEveryRank({Agreed(BroadcastCall(9, 3)), Agreed(BroadcastCall(9, 3)), Agreed(BroadcastCall(9, 3)),
                             Agreed(BroadcastCall(9, 3)), Agreed(BroadcastCall(10, 3))},
                            /*shm=*/true);
}

TEST(MismatchTest, AgreedGatherCountsDisagreeOnFiveRanks) {
  ExpectMismatchOnEveryRank({Agreed(GatherCall(4, 1)), Agreed(GatherCall(4, 1)), Agreed(GatherCall(5, 1)),
                             Agreed(GatherCall(4, 1)), Agreed(GatherCall(4, 1))});
}

TEST(MismatchTest, AgreedRanksRunTheCall) {
  Outcome o =
      RunCalls({Agreed(BroadcastCall(1000, 2)), Agreed(BroadcastCall(1000, 2)), Agreed(BroadcastCall(1000, 2))});
  for (const Status& st : o.status) EXPECT_TRUE(st.ok()) << st.ToString();
}

// A rank in the agreement of a rooted call against ranks in an all_reduce: the
// agreement's messages carry the call's fingerprint, so the all_reduce ranks see it.
TEST(MismatchTest, AgreedBroadcastAgainstAllReduce) {
  Outcome o = RunCalls({AllReduceRingCall(64), Agreed(BroadcastCall(64, 0)), AllReduceRingCall(64)});
  ExpectMismatchNaming(o, "broadcast(count=64, float32, root=0)", "all_reduce(count=64, float32, sum)");
}

// One rank of a broadcast whose data rides the agreement (BroadcastAgreed): its call,
// and its buffer (the root's input; elsewhere a pattern of its own that must stay
// unless the call succeeds).
struct AgreedBroadcast {
  size_t count;
  DataType dtype;
  int root;
  std::vector<uint8_t> buf;

  AgreedBroadcast(size_t c, DataType t, int r, int rank) : count(c), dtype(t), root(r), buf(c * DataTypeSize(t)) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rank * 41 + i * 7 + 1);
  }
  Call Make() {
    return Call{Fingerprint(Collective::kBroadcast, count, dtype, ReduceOp::kSum, root),
                [this](const Context& ctx) { return algos::BroadcastAgreed(ctx, buf.data(), count, dtype, root); }};
  }
};

struct BroadcastSpec {
  size_t count;
  DataType dtype;
  int root;
};

// Every rank reports kMismatch naming its call and another, and no rank's buffer changed.
void ExpectAgreedBroadcastMismatch(const std::vector<BroadcastSpec>& specs, bool shm = false) {
  std::vector<AgreedBroadcast> ranks;
  ranks.reserve(specs.size());
  for (size_t r = 0; r < specs.size(); ++r)
    ranks.emplace_back(specs[r].count, specs[r].dtype, specs[r].root, static_cast<int>(r));
  std::vector<std::vector<uint8_t>> before;
  std::vector<Call> calls;
  for (AgreedBroadcast& b : ranks) {
    before.push_back(b.buf);
    calls.push_back(b.Make());
  }
  ExpectMismatchOnEveryRank(calls, shm);
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(ranks[r].buf, before[r]) << "rank " << r << "'s buffer changed";
}

TEST(MismatchTest, AgreedSmallBroadcastRootsDisagree) {
  const DataType f32 = DataType::kFloat32;
  ExpectAgreedBroadcastMismatch({{2, f32, 0}, {2, f32, 1}});
  ExpectAgreedBroadcastMismatch({{2, f32, 0}, {2, f32, 0}, {2, f32, 1}});
  ExpectAgreedBroadcastMismatch({{2, f32, 4}, {2, f32, 4}, {2, f32, 4}, {2, f32, 4}, {2, f32, 1}});
}

// Sizes that differ change the messages' sizes as well: the receiver learns the other
// call from the transport's mismatch all the same.
TEST(MismatchTest, AgreedSmallBroadcastSizesDisagree) {
  const DataType f32 = DataType::kFloat32;
  ExpectAgreedBroadcastMismatch({{7, f32, 0}, {8, f32, 0}});
  ExpectAgreedBroadcastMismatch({{7, f32, 2}, {7, f32, 2}, {0, f32, 2}});
  ExpectAgreedBroadcastMismatch({{100, f32, 3}, {100, f32, 3}, {100, f32, 3}, {100, f32, 3}, {101, f32, 3}});
}

// The same over shared memory. On 5 ranks a rank learns the mismatch in the first round
// and its barrier's unfingerprinted messages then reach peers whose Recvs declared the
// call's fingerprint: those must not fail the group (transport/matching.h), or the rank
// leaves the barrier early and its abort fails peers still disseminating.
TEST(MismatchTest, AgreedSmallBroadcastDisagreesOverShm) {
  const DataType f32 = DataType::kFloat32;
  ExpectAgreedBroadcastMismatch({{7, f32, 0}, {8, f32, 0}}, /*shm=*/true);
  ExpectAgreedBroadcastMismatch({{7, f32, 2}, {7, f32, 2}, {7, f32, 1}}, /*shm=*/true);
  ExpectAgreedBroadcastMismatch({{9, f32, 3}, {9, f32, 3}, {9, f32, 3}, {9, f32, 3}, {9, DataType::kInt32, 3}},
                                /*shm=*/true);
}

TEST(MismatchTest, AgreedSmallBroadcastDtypesDisagree) {
  const DataType f32 = DataType::kFloat32, i32 = DataType::kInt32, u8 = DataType::kUint8;
  ExpectAgreedBroadcastMismatch({{16, f32, 1}, {16, i32, 1}});
  ExpectAgreedBroadcastMismatch({{16, i32, 0}, {16, f32, 0}, {16, i32, 0}});
  // The same bytes (64 uint8 and 16 int32), another call.
  ExpectAgreedBroadcastMismatch({{16, i32, 2}, {16, i32, 2}, {16, i32, 2}, {64, u8, 2}, {16, i32, 2}});
}

// The root's bytes reach every rank from every root, on worlds of 1 to 5 ranks, for
// sizes around the selector's thresholds (BroadcastAgreed itself has none): two ranks
// take the pair's path, up to a chunk.
TEST(MismatchTest, AgreedSmallBroadcastDeliversFromEveryRoot) {
  const size_t t = algos::kAgreedBroadcastMaxBytes, chunk = algos::CostModel().chunk_bytes;
  for (int n : {1, 2, 3, 4, 5}) {
    Result<std::unique_ptr<TcpWorld>> w = TcpWorld::Create(n);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, t - 1, t, t + 1, chunk + 5}) {
        std::vector<AgreedBroadcast> ranks;
        ranks.reserve(n);
        for (int r = 0; r < n; ++r) ranks.emplace_back(bytes, DataType::kUint8, root, r);
        const std::vector<uint8_t> want = ranks[root].buf;
        std::vector<Call> calls;
        for (AgreedBroadcast& b : ranks) calls.push_back(b.Make());
        std::vector<Status> st = w.value()->Run([&](int r) { return calls[r].fingerprint; },
                                                [&](int r, const Context& ctx) { return calls[r].run(ctx); });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(st[r].ok()) << "rank " << r << " of " << n << ", root " << root << ", " << bytes
                                  << " B: " << st[r].ToString();
          EXPECT_EQ(ranks[r].buf, want) << "rank " << r << " of " << n << ", root " << root << ", " << bytes << " B";
        }
      }
    }
  }
}

// A rank whose broadcast agrees in its own rounds against ranks that agree first and
// run the tree: the fingerprints name different algorithms, so every rank gets kMismatch.
TEST(MismatchTest, AgreedSmallBroadcastAgainstTheTree) {
  AgreedBroadcast own(4, DataType::kFloat32, 0, 1);
  Call fused = own.Make();
  fused.fingerprint = algos::WithAlgorithm(fused.fingerprint, static_cast<int>(algos::Algorithm::kDissemination));
  Call tree = Agreed(BroadcastCall(4, 0));
  tree.fingerprint = algos::WithAlgorithm(tree.fingerprint, static_cast<int>(algos::Algorithm::kTree));
  const std::vector<uint8_t> before = own.buf;
  ExpectMismatchOnEveryRank({tree, fused, tree});
  EXPECT_EQ(own.buf, before);
}

// Ranks that disagree on the root may build trees that never connect (here: two
// ranks that each believe they are the root of a reduce exchange no message at
// all), so no fingerprint can catch it: the agreement above does, and without it the
// deadline must, on every rank.
TEST(MismatchTest, DisjointSchedulesEndAtTheDeadline) {
  Outcome o = RunCalls({ReduceCall(8, 0), ReduceCall(8, 1)}, /*deadline_ms=*/500);
  ASSERT_EQ(o.status.size(), 2u);
  // Whichever rank times out first aborts its transport, which may fail the other
  // one with kPeerFailed before its own deadline passes.
  int timeouts = 0;
  for (const Status& st : o.status) {
    EXPECT_FALSE(st.ok());
    if (st.code() == StatusCode::kTimeout) ++timeouts;
  }
  EXPECT_GE(timeouts, 1) << o.status[0].ToString() << "; " << o.status[1].ToString();
  EXPECT_LT(o.seconds, 5.0);
}

}  // namespace
}  // namespace chorus::testing
