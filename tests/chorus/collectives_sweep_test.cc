// Every collective through the public API on world sizes 1..5 (forked ranks, file://
// rendezvous; shared memory (through the rings, and read from the sender's memory)
// and TCP on loopback), checked against the scalar reference with fresh
// inputs per call: all 8 dtypes x sizes {0, 1, 7, n-1, 1023} with the op, the
// placement (in place / out of place), the root (mostly non-zero) and the form
// (blocking / I-form) rotating across the product; 1 MiB + 3 elements once per
// collective; all_reduce just below and above the size where the selector switches
// from recursive doubling to ring; count 0 with null buffers. The algorithm-level
// sweep (tests/algos/collectives_test.cc) covers the full dtype x op product; this
// one covers what the API adds: validation, dispatch, buffer conventions, Work.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "chorus/communicator.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

using algos::Collective;

constexpr Collective kDataCollectives[] = {Collective::kAllReduce, Collective::kBroadcast,     Collective::kReduce,
                                           Collective::kAllGather, Collective::kReduceScatter, Collective::kGather,
                                           Collective::kScatter,   Collective::kAllToAll};

bool Blocks(Collective k) {
  return k == Collective::kAllGather || k == Collective::kReduceScatter || k == Collective::kGather ||
         k == Collective::kScatter || k == Collective::kAllToAll;
}

std::vector<ApiCase> SweepCases(int n) {
  std::vector<ApiCase> cases;
  const uint64_t un = static_cast<uint64_t>(n);
  const std::set<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), 1023};
  int ki = 0;
  for (Collective k : kDataCollectives) {
    ++ki;
    for (int ti = 0; ti < 8; ++ti) {
      int si = 0;
      for (size_t count : counts) {
        ++si;
        ApiCase c;
        c.kind = k;
        c.dtype = kAllTypes[ti];
        c.op = kAllOps[(ki + ti + si) % 5];
        c.count = count;
        c.in_place = k != Collective::kBroadcast && (ki + ti + si) % 2 == 1;
        c.root = (ki + 2 * ti + si) % n;
        c.null_when_empty = count == 0 && ti % 2 == 0;
        c.seed = SeedOf({un, static_cast<uint64_t>(ki), static_cast<uint64_t>(ti), count});
        cases.push_back(c);
      }
    }
    // 1 MiB + 3 elements per rank (per rank block for the block collectives).
    ApiCase big;
    big.kind = k;
    big.dtype = kAllTypes[(ki + n) % 8];
    big.op = kAllOps[(ki + n) % 5];
    big.count = (size_t{1} << 20) / DataTypeSize(big.dtype) / (Blocks(k) ? n : 1) + 3;
    big.in_place = k != Collective::kBroadcast && (ki + n) % 2 == 0;
    big.root = n - 1 - ki % n;
    big.seed = SeedOf({un, static_cast<uint64_t>(ki), 1 << 20});
    cases.push_back(big);
  }
  // all_reduce at the selector's threshold (64 KiB by default): recursive doubling
  // up to it, ring above.
  for (DataType t : {DataType::kFloat32, DataType::kInt8, DataType::kBFloat16}) {
    for (size_t extra : {0, 1}) {
      ApiCase c;
      c.kind = Collective::kAllReduce;
      c.dtype = t;
      c.op = extra == 0 ? ReduceOp::kSum : ReduceOp::kAvg;
      c.count = (64 << 10) / DataTypeSize(t) + extra;
      c.in_place = extra == 1;
      c.seed = SeedOf({un, static_cast<uint64_t>(t), c.count});
      cases.push_back(c);
    }
  }
  ApiCase barrier;
  barrier.kind = Collective::kBarrier;
  cases.push_back(barrier);
  return cases;
}

// check: what is wrong with the communicator's transport ("" when nothing).
int SweepRank(int rank, const Options& o, const std::function<std::string(const std::string&)>& check = nullptr) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Communicator& c = **comm;
  const int n = c.size();
  if (check) {
    const std::string wrong = check(c.Describe());
    RANK_CHECK(wrong.empty(), wrong);
  }
  int i = 0;
  for (const ApiCase& spec : SweepCases(n)) {
    ApiCall call(spec, rank, n);
    // Alternate the blocking form and the I-form (Work::Wait).
    Status st = (i++ % 2 == 0) ? call.Run(c) : call.Post(c).Wait();
    RANK_CHECK(st.ok(), "rank " + std::to_string(rank) + " " + spec.Describe() + ": " + st.ToString());
    RANK_OK(call.Check());
  }
  RANK_OK(c.Shutdown());
  return 0;
}

// World size, and the transport between the ranks of this host: "shm" (the rings),
// "shm_single_copy" (large messages read from the sender's memory) or "tcp".
using SweepParam = std::tuple<int, std::string>;
class ApiSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(ApiSweep, EveryCollectiveAgainstTheReference) {
  const int n = std::get<0>(GetParam());
  const std::string& transport = std::get<1>(GetParam());
  Options o = FileInitOptions();
  Config c = o.config.value_or(Config::Process());
  c.transport = transport == "tcp" ? TransportMode::kTcp : TransportMode::kShm;
  c.shm_single_copy = transport == "shm_single_copy" ? ShmSingleCopy::kOn : ShmSingleCopy::kOff;
  o.config = c;
  MultiProcOptions mp;
  mp.timeout_seconds = 120;
  for (const RankExit& e : RunRanks(
           n,
           [&](int r) {
             // The transport asked for is the one in use.
             return SweepRank(r, o, [&](const std::string& d) {
               const std::string want = ModeName(c.transport);
               return n == 1 || d.find(", " + want) != std::string::npos ? "" : "not on " + want + ": " + d;
             });
           },
           mp)) {
    EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

// CHORUS_STAGING_WINDOW at its smallest (4 KiB): all_reduce, broadcast and reduce of
// more than 4 KiB run as several collectives, host buffers too (every rank must split
// a call alike, whatever its buffers), blocking and I-form, in place and not.
TEST(ApiSweepInWindows, EveryCollectiveAgainstTheReference) {
  Options o = FileInitOptions();
  Config c = o.config.value_or(Config::Process());
  c.staging_window_bytes = 4096;
  o.config = c;
  MultiProcOptions mp;
  mp.timeout_seconds = 120;
  for (const RankExit& e : RunRanks(
           3, [&](int r) { return SweepRank(r, o); }, mp)) {
    EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

// Three TCP channels (ranks asking 3, 4 and 3: the fewest wins): the collectives' messages
// of 256 KiB and more are cut in two, on channels 1 and 2, each moved by its
// own engine thread.
TEST(ApiSweepInChannels, EveryCollectiveAgainstTheReference) {
  Options o = FileInitOptions();
  MultiProcOptions mp;
  mp.timeout_seconds = 120;
  for (const RankExit& e : RunRanks(
           3,
           [&](int r) {
             Options mine = o;
             Config c = o.config.value_or(Config::Process());
             c.transport = TransportMode::kTcp;
             c.tcp_lanes = r == 1 ? 4 : 3;
             mine.config = c;
             return SweepRank(r, mine);
           },
           mp)) {
    EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

// Ranks on several hosts (CHORUS_HOSTID per rank; host k of rank r is hosts[r]): shared
// memory among the ranks of each host, TCP between hosts, in one communicator; groups
// need not be contiguous nor even. Shared memory never spans two hosts: each rank's
// shm part counts the ranks of its own host only.
struct Placement {
  std::string name;
  std::vector<int> hosts;
};
class ApiSweepPlacements : public ::testing::TestWithParam<Placement> {};

// forced: CHORUS_ALGO for every rank (nullopt: the selector chooses).
void SweepPlacement(const std::vector<int>& hosts, std::optional<algos::Algorithm> forced) {
  const int n = static_cast<int>(hosts.size());
  Options o = FileInitOptions();
  MultiProcOptions mp;
  mp.timeout_seconds = 180;
  for (const RankExit& e : RunRanks(
           n,
           [&](int r) {
             Options mine = o;
             Config c = o.config.value_or(Config::Process());
             c.transport = TransportMode::kAuto;
             c.host_id = "host" + std::to_string(hosts[r]);
             c.algo = forced;
             mine.config = c;
             const int local = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[r]));
             return SweepRank(r, mine, [&](const std::string& d) -> std::string {
               if (local == 1) return d.find("shm") == std::string::npos ? "" : "alone on its host, yet: " + d;
               const bool ok = d.find("shm (" + std::to_string(local) + " ranks on this host") != std::string::npos &&
                               d.find(" + tcp") != std::string::npos;
               return ok ? "" : "expected shm among " + std::to_string(local) + " ranks and tcp: " + d;
             });
           },
           mp)) {
    EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

TEST_P(ApiSweepPlacements, EveryCollectiveAgainstTheReference) { SweepPlacement(GetParam().hosts, std::nullopt); }

// CHORUS_ALGO=hierarchical: all_reduce, broadcast and reduce (every case's root),
// all_gather and reduce_scatter (hosts of as many ranks; elsewhere the flat choice) over
// shared memory and across hosts; the other collectives as they choose.
TEST_P(ApiSweepPlacements, HierarchicalForcedAgainstTheReference) {
  SweepPlacement(GetParam().hosts, algos::Algorithm::kHierarchical);
}

INSTANTIATE_TEST_SUITE_P(Hosts, ApiSweepPlacements,
                         ::testing::Values(Placement{"TwoByTwo", {0, 0, 1, 1}},
                                           Placement{"TwoByThree", {0, 0, 0, 1, 1, 1}},
                                           Placement{"ThreePlusOne", {0, 0, 0, 1}},
                                           Placement{"Interleaved", {0, 1, 0, 1, 0}}),
                         [](const ::testing::TestParamInfo<Placement>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(WorldSizes, ApiSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values("shm", "shm_single_copy", "tcp")),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace chorus::testing
