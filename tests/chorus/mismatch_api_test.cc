// Ranks that make mismatched collective calls through the public API (another
// collective, or the same one with another count, dtype, op or root; blocking or
// I-form) get an error naming both calls, well before the timeout, never a hang or
// silently wrong data. The rank that sees the foreign message reports kMismatch;
// the others fail with kPeerFailed carrying that report (a rank whose own part
// completed learns of it on its next call).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "algos/fingerprint.h"
#include "chorus/communicator.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

using algos::Collective;

constexpr int64_t kTimeoutMs = 15000;

// Exit codes of a rank (the parent needs all ranks' outcomes together).
constexpr int kSawMismatch = 0;    // kMismatch naming both calls
constexpr int kSawPeerFailed = 4;  // kPeerFailed naming both calls

ApiCase Spec(Collective kind, size_t count, DataType dtype = DataType::kFloat32, ReduceOp op = ReduceOp::kSum,
             int root = 0) {
  ApiCase c;
  c.kind = kind;
  c.count = count;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  c.seed = count;
  return c;
}

std::string Describe(const ApiCase& c) {
  // What the API passes for the fields a collective does not use.
  const bool reduces =
      c.kind == Collective::kAllReduce || c.kind == Collective::kReduce || c.kind == Collective::kReduceScatter;
  const bool rooted = c.kind == Collective::kBroadcast || c.kind == Collective::kReduce ||
                      c.kind == Collective::kGather || c.kind == Collective::kScatter;
  if (c.kind == Collective::kBarrier) return "barrier()";
  return algos::DescribeFingerprint(
      algos::Fingerprint(c.kind, c.count, c.dtype, reduces ? c.op : ReduceOp::kSum, rooted ? c.root : 0));
}

struct MismatchCase {
  std::string name;
  std::vector<ApiCase> calls;  // one per rank
  bool async = false;          // I-forms instead of blocking calls
  int64_t window = 0;          // CHORUS_STAGING_WINDOW where not 0
};

int MismatchRank(int rank, const Options& o, const MismatchCase& m) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  // A matched call first: the communicator works, and the mismatch is not the first call.
  ApiCall warmup(Spec(Collective::kAllReduce, 33), rank, (*comm)->size());
  RANK_OK(warmup.Run(**comm));
  RANK_OK(warmup.Check());

  ApiCall call(m.calls[rank], rank, (*comm)->size());
  Status st = m.async ? call.Post(**comm).Wait() : call.Run(**comm);
  std::fprintf(stderr, "rank %d (%s): %s\n", rank, Describe(m.calls[rank]).c_str(), st.ToString().c_str());
  if (st.ok()) {
    // This rank's part completed (it only sent, say) before anyone noticed: its next
    // call learns of the mismatch through the peer's abort.
    st = (*comm)->Barrier();
    std::fprintf(stderr, "rank %d then: %s\n", rank, st.ToString().c_str());
    RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
  }
  // The error names this rank's call and a different one.
  const std::string mine = Describe(m.calls[rank]);
  bool other_named = false;
  for (const ApiCase& c : m.calls) {
    const std::string d = Describe(c);
    if (d != mine && st.message().find(d) != std::string::npos) other_named = true;
  }
  RANK_CHECK(st.message().find(mine) != std::string::npos || st.code() == StatusCode::kPeerFailed,
             "error does not name " + mine + ": " + st.ToString());
  RANK_CHECK(other_named, "error names no other call: " + st.ToString());
  if (st.code() == StatusCode::kMismatch) return kSawMismatch;
  RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
  return kSawPeerFailed;
}

class MismatchApi : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(MismatchApi, ErrorNamesBothCallsBeforeTheTimeout) {
  const MismatchCase& m = GetParam();
  Options o;
  o.init_method = "file://" + UniqueRendezvousFile();
  Config c = Config::Process();
  c.timeout_ms = kTimeoutMs;
  c.connect_timeout_ms = 20000;
  if (m.window > 0) c.staging_window_bytes = m.window;
  o.config = c;
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankExit> exits =
      RunRanks(static_cast<int>(m.calls.size()), [&](int r) { return MismatchRank(r, o, m); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int mismatches = 0;
  for (const RankExit& e : exits) {
    EXPECT_TRUE(e.exited && (e.code == kSawMismatch || e.code == kSawPeerFailed)) << e.Describe();
    if (e.exited && e.code == kSawMismatch) ++mismatches;
  }
  EXPECT_GE(mismatches, 1) << "no rank reported kMismatch";
  EXPECT_LT(seconds, kTimeoutMs / 1000.0 / 2) << "the mismatch took too long to surface";
}

std::vector<MismatchCase> Cases() {
  using C = Collective;
  const DataType f32 = DataType::kFloat32;
  return {
      {"AllReduceCounts", {Spec(C::kAllReduce, 10), Spec(C::kAllReduce, 11)}},
      {"AllReduceCountsAsync", {Spec(C::kAllReduce, 100000), Spec(C::kAllReduce, 100001)}, true},
      {"AllReduceOps", {Spec(C::kAllReduce, 64, f32, ReduceOp::kSum), Spec(C::kAllReduce, 64, f32, ReduceOp::kMax)}},
      {"AllReduceDtypesThreeRanks",
       {Spec(C::kAllReduce, 100), Spec(C::kAllReduce, 100), Spec(C::kAllReduce, 100, DataType::kInt32)}},
      {"AllGatherVsAllToAll", {Spec(C::kAllGather, 64), Spec(C::kAllToAll, 64)}},
      {"ReduceScatterVsAllReduce", {Spec(C::kReduceScatter, 100), Spec(C::kAllReduce, 100)}},
      {"GatherVsScatter",
       {Spec(C::kGather, 64, f32, ReduceOp::kSum, 0), Spec(C::kScatter, 64, f32, ReduceOp::kSum, 1)}},
      {"BarrierVsAllReduce", {Spec(C::kBarrier, 0), Spec(C::kAllReduce, 8)}, true},
      {"BroadcastCounts",
       {Spec(C::kBroadcast, 50, f32, ReduceOp::kSum, 1), Spec(C::kBroadcast, 60, f32, ReduceOp::kSum, 1),
        Spec(C::kBroadcast, 50, f32, ReduceOp::kSum, 1)}},
      {"ReduceOpsThreeRanks",
       {Spec(C::kReduce, 1000, f32, ReduceOp::kMin, 2), Spec(C::kReduce, 1000, f32, ReduceOp::kMin, 2),
        Spec(C::kReduce, 1000, f32, ReduceOp::kAvg, 2)}},
      // In windows of 4 KiB (1024 floats) the first two windows have the same size on
      // both ranks: the error still names the whole calls, at the first window.
      {"AllReduceCountsInWindows", {Spec(C::kAllReduce, 3000), Spec(C::kAllReduce, 2500)}, false, 4096},
      {"BroadcastCountsInWindowsAsync",
       {Spec(C::kBroadcast, 5000, f32, ReduceOp::kSum, 1), Spec(C::kBroadcast, 4500, f32, ReduceOp::kSum, 1)},
       true,
       4096},
  };
}

// Ranks configured differently (CHORUS_ALGO, CHORUS_HOSTID) run different
// schedules for the same all_reduce; the fingerprint carries the algorithm, so they
// get kMismatch naming both calls and both algorithms instead of waiting for the
// deadline.
TEST(MismatchApiConfig, RanksForcingDifferentAlgorithms) {
  const std::string rdv = "file://" + UniqueRendezvousFile();
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankExit> exits = RunRanks(2, [&](int rank) {
    Options o;
    o.init_method = rdv;
    Config c = Config::Process();
    c.timeout_ms = kTimeoutMs;
    c.algo = rank == 0 ? algos::Algorithm::kRing : algos::Algorithm::kRecursiveDoubling;
    o.config = c;
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    std::vector<float> buf(1000, 1.0f);
    Status st = (*comm)->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(st.code() == StatusCode::kMismatch || st.code() == StatusCode::kPeerFailed, st.ToString());
    RANK_CHECK(st.message().find("ring") != std::string::npos, st.ToString());
    RANK_CHECK(st.message().find("recursive_doubling") != std::string::npos, st.ToString());
    return 0;
  });
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kTimeoutMs / 2000.0);
}

INSTANTIATE_TEST_SUITE_P(Pairs, MismatchApi, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MismatchCase>& info) { return info.param.name; });

}  // namespace
}  // namespace chorus::testing
