// Ranks that make mismatched collective calls through the public API (another
// collective, or the same one with another count, dtype, op or root; blocking or
// I-form) get an error naming both calls, well before the timeout, never a hang or
// silently wrong data. The rank that sees the foreign message reports kMismatch;
// the others fail with kPeerFailed carrying that report (a rank whose own part
// completed learns of it on its next call). Rooted collectives agree on the call
// first, so there every rank gets kMismatch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
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
  std::vector<int> hosts;      // where not empty: rank r on host hosts[r], CHORUS_ALGO=hierarchical
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

// Rooted collectives whose ranks disagree on the root (or count, dtype, op): a rank may
// never receive from the one that disagrees (roots 0 and 1 of a broadcast both only
// send), so the call first agrees on its fingerprint (algos/agreement.h). Every rank
// gets kMismatch naming its own call and another, none returns OK or waits for the
// deadline. The failed call aborts the communicator, as any mismatch does; a fresh one
// then runs the same collective correctly.
Status NamesMineAndAnother(const Status& st, const std::vector<ApiCase>& calls, const ApiCase& mine) {
  if (st.code() != StatusCode::kMismatch) return InternalError("not kMismatch: " + st.ToString());
  if (st.message().find(Describe(mine)) == std::string::npos) {
    return InternalError("error does not name " + Describe(mine) + ": " + st.ToString());
  }
  for (const ApiCase& c : calls) {
    if (Describe(c) != Describe(mine) && st.message().find(Describe(c)) != std::string::npos) return Status::Ok();
  }
  return InternalError("error names no other call: " + st.ToString());
}

int RootedRank(int rank, const Options& o, const Options& fresh, const MismatchCase& m) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  ApiCall call(m.calls[rank], rank, (*comm)->size());
  const auto start = std::chrono::steady_clock::now();
  Status st = m.async ? call.Post(**comm).Wait() : call.Run(**comm);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rank %d (%s): %s\n", rank, Describe(m.calls[rank]).c_str(), st.ToString().c_str());
  RANK_OK(NamesMineAndAnother(st, m.calls, m.calls[rank]));
  RANK_CHECK(seconds < kTimeoutMs / 1000.0 / 2, "the mismatch took " + std::to_string(seconds) + " s to surface");

  auto again = Communicator::Create(fresh);
  RANK_OK(again.status());
  ApiCase matched = m.calls[0];
  matched.seed += 1;
  ApiCall ok(matched, rank, (*again)->size());
  RANK_OK(m.async ? ok.Post(**again).Wait() : ok.Run(**again));
  RANK_OK(ok.Check());
  return 0;
}

Options RootedOptions(int64_t window) {
  Options o = FileInitOptions(kTimeoutMs);
  if (window > 0) o.config->staging_window_bytes = window;
  return o;
}

class RootedMismatchApi : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(RootedMismatchApi, EveryRankGetsMismatchNamingBothCalls) {
  const MismatchCase& m = GetParam();
  const Options o = RootedOptions(m.window), fresh = RootedOptions(m.window);
  ExpectAllOk(RunRanks(static_cast<int>(m.calls.size()), [&](int r) {
    Options mine = o, mine_fresh = fresh;
    if (!m.hosts.empty()) {
      for (Options* each : {&mine, &mine_fresh}) {
        each->config->host_id = "host" + std::to_string(m.hosts[r]);
        each->config->algo = algos::Algorithm::kHierarchical;
      }
    }
    return RootedRank(r, mine, mine_fresh, m);
  }));
}

// The call of each rank: `kind` of `count` float32 (8 bytes: 2; over 1 MiB: 300000),
// roots as given.
std::vector<ApiCase> Roots(Collective kind, size_t count, std::vector<int> roots) {
  std::vector<ApiCase> calls;
  for (int root : roots) calls.push_back(Spec(kind, count, DataType::kFloat32, ReduceOp::kSum, root));
  return calls;
}

std::vector<MismatchCase> RootedCases() {
  using C = Collective;
  const DataType f32 = DataType::kFloat32;
  constexpr size_t kSmall = 2, kLarge = 300000;
  std::vector<MismatchCase> cases;
  for (auto [kind, name] : {std::pair<C, std::string>{C::kBroadcast, "Broadcast"},
                            {C::kScatter, "Scatter"},
                            {C::kReduce, "Reduce"},
                            {C::kGather, "Gather"}}) {
    cases.push_back({name + "Roots01", Roots(kind, kSmall, {0, 1})});
    cases.push_back({name + "Roots01Large", Roots(kind, kLarge, {0, 1})});
    cases.push_back({name + "Roots001", Roots(kind, kSmall, {0, 0, 1})});
    cases.push_back({name + "Roots001Large", Roots(kind, kLarge, {0, 0, 1})});
    cases.push_back({name + "Roots0003", Roots(kind, kSmall, {0, 0, 0, 3})});
    cases.push_back({name + "Roots1120Large", Roots(kind, kLarge, {1, 1, 2, 0})});
    cases.push_back({name + "Roots001Async", Roots(kind, kSmall, {0, 0, 1}), true});
    cases.push_back({name + "Counts",
                     {Spec(kind, 7, f32, ReduceOp::kSum, 1), Spec(kind, 8, f32, ReduceOp::kSum, 1),
                      Spec(kind, 7, f32, ReduceOp::kSum, 1)}});
  }
  // In windows of 4 KiB: the first window already disagrees.
  cases.push_back({"BroadcastRoots01InWindows", Roots(C::kBroadcast, kLarge, {0, 1}), false, 4096});
  cases.push_back({"ReduceRoots010InWindowsAsync", Roots(C::kReduce, 5000, {0, 1, 0}), true, 4096});
  cases.push_back(
      {"ReduceOps", {Spec(C::kReduce, 5, f32, ReduceOp::kSum, 0), Spec(C::kReduce, 5, f32, ReduceOp::kMax, 0)}});
  cases.push_back(
      {"GatherDtypes",
       {Spec(C::kGather, 5, f32, ReduceOp::kSum, 0), Spec(C::kGather, 5, DataType::kInt32, ReduceOp::kSum, 0)}});
  // The hierarchical broadcast (forced): a root on the other host, or on the same host,
  // where the ranks of one host may only ever hear from their bridge.
  MismatchCase hier{"HierarchicalBroadcastRoots0001Large", Roots(C::kBroadcast, kLarge, {0, 0, 0, 1})};
  hier.hosts = {0, 1, 0, 1};
  cases.push_back(hier);
  hier = {"HierarchicalBroadcastRoots2220", Roots(C::kBroadcast, kSmall, {2, 2, 2, 0})};
  hier.hosts = {0, 1, 0, 1};
  cases.push_back(hier);
  hier = {"HierarchicalBroadcastRoots01LargeUneven", Roots(C::kBroadcast, kLarge, {0, 1, 0, 0})};
  hier.hosts = {0, 0, 0, 1};
  cases.push_back(hier);
  // The hierarchical reduce (forced) likewise: bridges that differ never hear from each other.
  hier = {"HierarchicalReduceRoots0001Large", Roots(C::kReduce, kLarge, {0, 0, 0, 1})};
  hier.hosts = {0, 1, 0, 1};
  cases.push_back(hier);
  hier = {"HierarchicalReduceRoots2220", Roots(C::kReduce, kSmall, {2, 2, 2, 0})};
  hier.hosts = {0, 1, 0, 1};
  cases.push_back(hier);
  hier = {"HierarchicalReduceRoots01LargeUneven", Roots(C::kReduce, kLarge, {0, 1, 0, 0})};
  hier.hosts = {0, 0, 0, 1};
  cases.push_back(hier);
  cases.push_back({"BroadcastVsScatter",
                   {Spec(C::kBroadcast, 5, f32, ReduceOp::kSum, 0), Spec(C::kScatter, 5, f32, ReduceOp::kSum, 0)}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Rooted, RootedMismatchApi, ::testing::ValuesIn(RootedCases()),
                         [](const ::testing::TestParamInfo<MismatchCase>& info) { return info.param.name; });

// The same within sub-communicators: ranks {0, 2} and {1, 3} each broadcast with
// roots 0 and 1 of their group; every rank gets kMismatch, and the parent communicator,
// whose transport is its own, still works.
TEST(RootedMismatchApiSplit, EveryRankOfEachGroup) {
  const Options o = FileInitOptions(kTimeoutMs);
  ExpectAllOk(RunRanks(4, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    auto sub = (*comm)->Split(rank % 2, rank);
    RANK_OK(sub.status());
    const int sub_rank = (*sub)->rank();
    const std::vector<ApiCase> calls = Roots(Collective::kBroadcast, 4, {0, 1});
    ApiCall call(calls[sub_rank], sub_rank, (*sub)->size());
    Status st = call.Run(**sub);
    std::fprintf(stderr, "rank %d (group rank %d): %s\n", rank, sub_rank, st.ToString().c_str());
    RANK_OK(NamesMineAndAnother(st, calls, calls[sub_rank]));
    ApiCall ok(Spec(Collective::kBroadcast, 1000, DataType::kFloat32, ReduceOp::kSum, 3), rank, (*comm)->size());
    RANK_OK(ok.Run(**comm));
    RANK_OK(ok.Check());
    return 0;
  }));
}

INSTANTIATE_TEST_SUITE_P(Pairs, MismatchApi, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MismatchCase>& info) { return info.param.name; });

}  // namespace
}  // namespace chorus::testing
