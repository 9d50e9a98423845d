// CHORUS_ALGO through the public API. all_reduce forced to ring, to recursive
// doubling, to Rabenseifner and to the tree must all match the scalar reference, and agree bit for
// bit wherever the result does not depend on the order of the reduction (integers,
// MAX/MIN), on every dtype x op, on sizes on both sides of the automatic threshold,
// on world sizes 2..5 (3 and 5 make the log-step ones fold extra ranks in). The
// algorithm that ran is the one forced: the error of a mismatched call names it.
// The variable itself works too, an algorithm that does not apply to a collective is
// ignored for it, and a bad value is refused naming the variable.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "common/env.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

using algos::Collective;

Options ForcedOptions(algos::Algorithm algo) {
  Options o = FileInitOptions();
  o.config->algo = algo;
  return o;
}

// What a rank's exit code says about a mismatched call (ExpectAlgorithmNamed).
constexpr int kNamed = 0;      // the call failed naming the algorithm that ran
constexpr int kPreempted = 3;  // a peer's abort reached this rank before its call began

// Rank 0 calls all_reduce with `count` elements, the others with count + 1: every
// call fails. A rank that ran the algorithm names it in its error ("... (ring)"); a
// rank that the first failing peer's abort reached before its call began fails
// with that peer's error and runs nothing.
int ExpectAlgorithmNamed(Communicator& c, size_t count, const std::string& algorithm) {
  std::vector<float> buf(count + 1, 1.0f);
  Status st =
      c.AllReduce(buf.data(), buf.data(), c.rank() == 0 ? count : count + 1, DataType::kFloat32, ReduceOp::kSum);
  RANK_CHECK(!st.ok(), "a mismatched all_reduce succeeded");
  if (st.message().find("(" + algorithm + ")") != std::string::npos) return kNamed;
  RANK_CHECK(st.code() == StatusCode::kPeerFailed && st.message().find("all_reduce") != std::string::npos,
             "expected the error to name " + algorithm + ": " + st.ToString());
  return kPreempted;
}

// Every rank exited kNamed or kPreempted, and at least one kNamed.
void ExpectNamedSomewhere(const std::vector<RankExit>& exits) {
  int named = 0;
  for (const RankExit& e : exits) {
    EXPECT_TRUE(e.exited && (e.code == kNamed || e.code == kPreempted)) << e.Describe();
    if (e.exited && e.code == kNamed) ++named;
  }
  EXPECT_GE(named, 1) << "no rank's error named the forced algorithm";
}

// The algorithms compared, the first being the one the others must agree with.
constexpr algos::Algorithm kCompared[] = {algos::Algorithm::kRing, algos::Algorithm::kRecursiveDoubling,
                                          algos::Algorithm::kRabenseifner, algos::Algorithm::kTree};

// options: one per kCompared, made in the parent (each names its own rendezvous file).
int CompareRank(int rank, const std::vector<Options>& options) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const Options& o : options) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    comms.push_back(std::move(comm.value()));
  }
  const int n = comms[0]->size();
  const std::set<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), 1023};
  std::vector<ApiCase> cases;
  for (int ti = 0; ti < 8; ++ti) {
    const size_t es = DataTypeSize(kAllTypes[ti]);
    std::set<size_t> these = counts;
    these.insert((64 << 10) / es + 1);  // above the automatic threshold
    for (int oi = 0; oi < 5; ++oi) {
      int ci = 0;
      for (size_t count : these) {
        ApiCase c;
        c.kind = Collective::kAllReduce;
        c.dtype = kAllTypes[ti];
        c.op = kAllOps[oi];
        c.count = count;
        c.in_place = (ti + oi + ci++) % 2 == 0;
        c.seed = SeedOf({static_cast<uint64_t>(n), static_cast<uint64_t>(ti), static_cast<uint64_t>(oi), count});
        cases.push_back(c);
      }
    }
  }
  // 1 MiB + 3 elements, a few (dtype, op) pairs.
  for (int k = 0; k < 3; ++k) {
    ApiCase c;
    c.kind = Collective::kAllReduce;
    c.dtype = kAllTypes[(n + 3 * k) % 8];
    c.op = kAllOps[(n + k) % 5];
    c.count = (size_t{1} << 20) / DataTypeSize(c.dtype) + 3;
    c.seed = SeedOf({static_cast<uint64_t>(n), 99, static_cast<uint64_t>(k)});
    cases.push_back(c);
  }
  for (const ApiCase& spec : cases) {
    std::vector<std::unique_ptr<ApiCall>> calls;
    for (size_t i = 0; i < comms.size(); ++i) {
      const std::string name = algos::AlgorithmName(kCompared[i]);
      calls.push_back(std::make_unique<ApiCall>(spec, rank, n));
      RANK_OK(calls[i]->Run(*comms[i]).WithContext(name + " " + spec.Describe()));
      RANK_OK(calls[i]->Check().WithContext(name));
    }
    const bool order_free = !IsFloat(spec.dtype) || spec.op == ReduceOp::kMax || spec.op == ReduceOp::kMin;
    for (size_t i = 1; order_free && i < calls.size(); ++i) {
      RANK_OK(CheckSameBytes(calls[0]->recv(), calls[i]->recv(), spec.count * DataTypeSize(spec.dtype))
                  .WithContext("ring vs " + std::string(algos::AlgorithmName(kCompared[i])) + " " + spec.Describe()));
    }
  }
  for (auto& comm : comms) RANK_OK(comm->Shutdown());
  return 0;
}

class ForcedAlgorithms : public ::testing::TestWithParam<int> {};

TEST_P(ForcedAlgorithms, RingRecursiveDoublingRabenseifnerAndTreeAgreeWithTheReference) {
  const int n = GetParam();
  std::vector<Options> options;
  for (algos::Algorithm a : kCompared) options.push_back(ForcedOptions(a));
  MultiProcOptions mp;
  mp.timeout_seconds = 120;
  for (const RankExit& e : RunRanks(
           n, [&](int r) { return CompareRank(r, options); }, mp)) {
    EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ForcedAlgorithms, ::testing::Values(2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

// Small calls would pick recursive doubling by themselves, large ones ring: force
// the other way round and see the forced one run.
TEST(ForcedAlgorithmRuns, RingOnASmallCall) {
  const Options o = ForcedOptions(algos::Algorithm::kRing);
  ExpectNamedSomewhere(RunRanks(3, [&](int) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    return ExpectAlgorithmNamed(**comm, 10, "ring");
  }));
}

TEST(ForcedAlgorithmRuns, RabenseifnerOnASmallAndALargeCall) {
  const Options o = ForcedOptions(algos::Algorithm::kRabenseifner);
  for (size_t count : {size_t{10}, size_t{300000}}) {
    ExpectNamedSomewhere(RunRanks(3, [&](int) {
      auto comm = Communicator::Create(o);
      RANK_OK(comm.status());
      return ExpectAlgorithmNamed(**comm, count, "rabenseifner");
    }));
  }
}

TEST(ForcedAlgorithmRuns, TreeOnASmallAndALargeCall) {
  const Options o = ForcedOptions(algos::Algorithm::kTree);
  for (size_t count : {size_t{10}, size_t{300000}}) {
    ExpectNamedSomewhere(RunRanks(3, [&](int) {
      auto comm = Communicator::Create(o);
      RANK_OK(comm.status());
      return ExpectAlgorithmNamed(**comm, count, "tree");
    }));
  }
}

TEST(ForcedAlgorithmRuns, RecursiveDoublingOnALargeCall) {
  const Options o = ForcedOptions(algos::Algorithm::kRecursiveDoubling);
  ExpectNamedSomewhere(RunRanks(3, [&](int) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    return ExpectAlgorithmNamed(**comm, 300000, "recursive_doubling");
  }));
}

// CHORUS_ALGO=scatter_allgather runs every broadcast through the API that way, small ones
// too (which would ride the agreement), from every root; reduce keeps its tree.
TEST(ForcedAlgorithmRuns, ScatterAllGatherBroadcastsFromEveryRoot) {
  const Options o = ForcedOptions(algos::Algorithm::kScatterAllGather);
  constexpr int kRanks = 3;
  auto exits = RunRanks(kRanks, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    int k = 0;
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{1023}, size_t{300001}}) {
      for (int root = 0; root < kRanks; ++root, ++k) {
        ApiCase spec;
        spec.kind = Collective::kBroadcast;
        spec.dtype = kAllTypes[k % 8];
        spec.count = count;
        spec.root = root;
        spec.seed = SeedOf({41, count, static_cast<uint64_t>(root)});
        ApiCall call(spec, rank, kRanks);
        RANK_OK(call.Run(**comm).WithContext(spec.Describe()));
        RANK_OK(call.Check().WithContext(spec.Describe()));
      }
    }
    for (size_t count : {size_t{8}, size_t{300001}}) {
      Result<std::string> why = (*comm)->Explain("broadcast", count, DataType::kFloat32);
      RANK_OK(why.status());
      RANK_CHECK(why->find("forced by CHORUS_ALGO=scatter_allgather") != std::string::npos, *why);
    }
    Result<std::string> reduce = (*comm)->Explain("reduce", 300001, DataType::kFloat32);
    RANK_OK(reduce.status());
    RANK_CHECK(reduce->find("tree") != std::string::npos, *reduce);
    RANK_OK((*comm)->Shutdown());
    return 0;
  });
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

// CHORUS_ALGO=hierarchical on two hosts of two ranks each (rank r on host r % 2):
// broadcast and reduce from every root, all_gather and reduce_scatter, in place and
// not, at counts that do not split into the hosts' ranks, match the reference, and
// Explain says they were forced. On hosts of 3 and 1 ranks the broadcast and the
// reduce still run it (by the hosts' first ranks); all_gather and reduce_scatter
// cannot, and Explain says so.
TEST(ForcedAlgorithmRuns, HierarchicalRootedAndBlockCollectivesOnTwoHosts) {
  for (const std::vector<int>& hosts : {std::vector<int>{0, 1, 0, 1}, std::vector<int>{0, 0, 0, 1}}) {
    const Options o = ForcedOptions(algos::Algorithm::kHierarchical);
    const int n = static_cast<int>(hosts.size());
    const bool even = hosts[1] == 1;
    auto exits = RunRanks(n, [&](int rank) {
      Options mine = o;
      mine.config->host_id = "host" + std::to_string(hosts[rank]);
      auto comm = Communicator::Create(mine);
      RANK_OK(comm.status());
      int k = 0;
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{300001}}) {
        for (int root = 0; root < n; ++root, ++k) {
          for (Collective kind :
               {Collective::kBroadcast, Collective::kAllGather, Collective::kReduce, Collective::kReduceScatter}) {
            const bool rooted = kind == Collective::kBroadcast || kind == Collective::kReduce;
            if (!rooted && root > 1) continue;  // no root: twice is enough
            ApiCase spec;
            spec.kind = kind;
            spec.dtype = kAllTypes[k % 8];
            spec.count = count;
            spec.root = root;
            spec.op = kAllOps[k % 5];
            spec.in_place = kind != Collective::kBroadcast && (rooted ? (root + k) % 2 == 1 : root == 1);
            spec.seed = SeedOf({43, count, static_cast<uint64_t>(root), static_cast<uint64_t>(kind)});
            ApiCall call(spec, rank, n);
            RANK_OK(call.Run(**comm).WithContext(spec.Describe()));
            RANK_OK(call.Check().WithContext(spec.Describe()));
          }
        }
      }
      for (const std::string coll : {"broadcast", "all_gather", "reduce", "reduce_scatter"}) {
        Result<std::string> why = (*comm)->Explain(coll, 300001, DataType::kFloat32);
        RANK_OK(why.status());
        const bool forced = even || coll == "broadcast" || coll == "reduce";
        const std::string want = forced ? "forced by CHORUS_ALGO=hierarchical"
                                        : "CHORUS_ALGO=hierarchical cannot run " + coll + " on 2 hosts (3, 1 ranks)";
        RANK_CHECK(why->find(want) != std::string::npos, *why);
      }
      RANK_OK((*comm)->Shutdown());
      return 0;
    });
    for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
  }
}

// CHORUS_ALGO=rd from the environment (read by Config::FromEnv, as the process
// configuration is) forces recursive doubling on a 1 MiB all_reduce.
TEST(ForcedAlgorithmsEnv, VariableForcesRecursiveDoubling) {
  const std::string rdv = "file://" + UniqueRendezvousFile();
  MultiProcOptions mp;
  mp.env["CHORUS_ALGO"] = "rd";
  auto exits = RunRanks(
      3,
      [&](int rank) {
        Result<Config> config = Config::FromEnv(ProcessEnv());
        RANK_OK(config.status());
        RANK_CHECK(config->algo == algos::Algorithm::kRecursiveDoubling, "CHORUS_ALGO=rd not read");
        config->timeout_ms = 20000;
        config->connect_timeout_ms = 20000;
        Options o;
        o.init_method = rdv;
        o.config = config.value();
        auto comm = Communicator::Create(o);
        RANK_OK(comm.status());
        ApiCase spec;
        spec.dtype = DataType::kInt32;
        spec.op = ReduceOp::kSum;
        spec.count = (size_t{1} << 20) / 4 + 3;
        spec.seed = SeedOf({3, 1 << 20});
        ApiCall call(spec, rank, 3);
        RANK_OK(call.Run(**comm));
        RANK_OK(call.Check());
        return ExpectAlgorithmNamed(**comm, 300000, "recursive_doubling");
      },
      mp);
  ExpectNamedSomewhere(exits);
}

// An algorithm that does not run all_reduce or reduce (chain) leaves them to the cost
// model; the collective it does apply to still works.
TEST(ForcedAlgorithmsEnv, InapplicableAlgorithmIsIgnored) {
  const Options o = ForcedOptions(algos::Algorithm::kChain);
  auto exits = RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    for (Collective k : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce}) {
      ApiCase spec;
      spec.kind = k;
      spec.dtype = DataType::kFloat32;
      spec.count = 100000;
      spec.root = 1;
      spec.seed = SeedOf({static_cast<uint64_t>(k), 7});
      ApiCall call(spec, rank, 2);
      RANK_OK(call.Run(**comm));
      RANK_OK(call.Check());
    }
    RANK_OK((*comm)->Shutdown());
    return 0;
  });
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

TEST(ForcedAlgorithmsEnv, BadValueIsRefusedNamingTheVariable) {
  // A forced algorithm set in code is a type; a bad name can only come from the
  // variable, which the configuration refuses (Communicator::Create returns it).
  MultiProcOptions mp;
  mp.env["CHORUS_ALGO"] = "bogus_algo";
  auto exits = RunRanks(
      1,
      [&](int) {
        Result<Config> config = Config::FromEnv(ProcessEnv());
        RANK_CHECK(!config.ok(), "CHORUS_ALGO=bogus_algo was accepted");
        const Status& st = config.status();
        RANK_CHECK(st.code() == StatusCode::kInvalidArgument, st.ToString());
        RANK_CHECK(st.message().find("CHORUS_ALGO") != std::string::npos, st.ToString());
        RANK_CHECK(st.message().find("bogus_algo") != std::string::npos, st.ToString());
        RANK_CHECK(st.message().find("recursive_doubling") != std::string::npos, st.ToString());
        return 0;
      },
      mp);
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

}  // namespace
}  // namespace chorus::testing
