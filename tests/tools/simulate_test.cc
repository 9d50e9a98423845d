// tools/simulate: its rows come from the selector's own model and choice, no
// prediction beats the lower bounds, predictions grow with the size, and bad flags are
// named.
#include "tools/simulate/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace chorus::simulate {
namespace {

using algos::Algorithm;
using algos::Collective;

constexpr Collective kEvery[] = {Collective::kBarrier,   Collective::kBroadcast, Collective::kReduce,
                                 Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                 Collective::kGather,    Collective::kScatter,   Collective::kAllToAll};

SimOptions Parse(const std::vector<std::string>& args) {
  Result<SimOptions> o = ParseSimFlags(args);
  EXPECT_TRUE(o.ok()) << o.status().message();
  return o.ok() ? o.value() : SimOptions{};
}

// Table links; links given (a fast network); one rank per host; a within-host link
// slower than the one between; worlds that fill no whole host and are no power of two.
std::vector<SimOptions> Configurations() {
  std::vector<SimOptions> out = {
      Parse({"--ranks", "1,2,3,16,24,64,4096", "-b", "1", "-e", "1G", "-f", "4"}),
      Parse({"--inter-latency-us", "2", "--inter-gbps", "12.5", "--ranks-per-host", "4", "--ranks", "4,6,32,1000", "-b",
             "8", "-e", "256M", "-f", "2"}),
      Parse({"--ranks-per-host", "1", "--ranks", "2,5,64", "-b", "8", "-e", "64M", "-f", "8"}),
      Parse({"--intra", "tcp", "--inter", "rdma", "--ranks-per-host", "3", "--ranks", "7,9,96", "-b", "8", "-e", "64M",
             "-f", "4"}),
  };
  for (SimOptions& o : out) o.collectives.assign(std::begin(kEvery), std::end(kEvery));
  return out;
}

TEST(SimulateTest, NoPredictionBeatsTheLowerBounds) {
  for (const SimOptions& o : Configurations()) {
    for (const Row& r : Simulate(o)) {
      ASSERT_FALSE(r.predicted.empty()) << algos::CollectiveName(r.collective) << " on " << r.world_size;
      for (const auto& [a, us] : r.predicted) {
        const std::string where = std::string(algos::CollectiveName(r.collective)) + " by " + algos::AlgorithmName(a) +
                                  " on " + std::to_string(r.world_size) + " ranks, " + std::to_string(r.hosts) +
                                  " hosts, " + std::to_string(r.bytes) + " B";
        EXPECT_GE(us * (1 + 1e-9), r.bounds.bandwidth_us) << where;
        EXPECT_GE(us * (1 + 1e-9), r.bounds.latency_us) << where;
      }
      if (r.world_size > 1 && r.collective != Collective::kBarrier) {
        EXPECT_GT(r.bounds.bandwidth_us, 0);
      }
      if (r.world_size > 1) {
        EXPECT_GT(r.bounds.latency_us, 0);
      }
    }
  }
}

TEST(SimulateTest, RowsAreTheSelectorsOwn) {
  for (const SimOptions& o : Configurations()) {
    for (const Row& r : Simulate(o)) {
      algos::SelectorConfig config;
      config.model = o.model;
      config.model.topology = WorldOf(r.world_size, o.ranks_per_host);
      ASSERT_EQ(config.model.topology.num_hosts(), r.hosts);
      const algos::Selector s = *algos::Selector::Create(config);
      EXPECT_EQ(r.chosen, s.Choose(r.collective, r.bytes, r.world_size).algorithm);
      for (const auto& [a, us] : r.predicted) {
        EXPECT_EQ(us, config.model.PredictUs(r.collective, a, r.bytes, r.world_size));
        if (a == r.chosen) {
          EXPECT_EQ(us, r.chosen_us);
        }
      }
    }
  }
}

TEST(SimulateTest, PredictionsGrowWithTheSize) {
  for (const SimOptions& o : Configurations()) {
    // (collective, world, algorithm) -> the last (bytes, us) seen; rows come in size order.
    std::map<std::tuple<Collective, int, Algorithm>, std::pair<size_t, double>> last;
    for (const Row& r : Simulate(o)) {
      for (const auto& [a, us] : r.predicted) {
        const auto key = std::make_tuple(r.collective, r.world_size, a);
        auto it = last.find(key);
        if (it != last.end()) {
          EXPECT_GE(us, it->second.second)
              << algos::CollectiveName(r.collective) << " by " << algos::AlgorithmName(a) << " on " << r.world_size
              << " ranks: " << it->second.first << " B then " << r.bytes << " B";
        }
        last[key] = {r.bytes, us};
      }
    }
  }
}

// The hierarchical all_reduce picks its step between hosts by the model, so a larger
// message is never predicted faster (on 512 hosts recursive doubling up to a chunk
// and the ring above once made 8 MiB faster than 4 MiB).
TEST(SimulateTest, NoDipAcrossHosts) {
  const SimOptions o = Parse({"--colls", "all_reduce", "--ranks", "4096", "-b", "4M", "-e", "8M"});
  const std::vector<Row> rows = Simulate(o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].chosen, Algorithm::kHierarchical);
  EXPECT_LT(rows[0].chosen_us, rows[1].chosen_us);
  EXPECT_EQ(FormatSummary(rows).find("note: the chosen time falls"), std::string::npos) << FormatSummary(rows);
}

TEST(SimulateTest, GivenLinksReplaceTheTableOnlyWhereSet) {
  algos::CostModel table;
  table.intra = algos::LinkKind::kShm;
  table.inter = algos::LinkKind::kTcp;
  EXPECT_EQ(table.IntraCost().latency_us, algos::CostOf(algos::LinkKind::kShm).latency_us);
  EXPECT_EQ(table.InterCost().gbps, algos::CostOf(algos::LinkKind::kTcp).gbps);

  const SimOptions both = Parse({"--inter-latency-us", "2", "--inter-gbps", "12.5GB/s"});
  ASSERT_TRUE(both.model.inter_cost.has_value());
  EXPECT_EQ(both.model.inter_cost->latency_us, 2);
  EXPECT_EQ(both.model.inter_cost->gbps, 12.5);
  EXPECT_FALSE(both.model.intra_cost.has_value());
  // Half given: the other half is the table's row for the kind.
  const SimOptions half = Parse({"--intra", "tcp", "--intra-latency-us", "5us"});
  ASSERT_TRUE(half.model.intra_cost.has_value());
  EXPECT_EQ(half.model.intra_cost->latency_us, 5);
  EXPECT_EQ(half.model.intra_cost->gbps, algos::CostOf(algos::LinkKind::kTcp).gbps);

  // A faster network is predicted faster, by the same model.
  algos::CostModel fast = table;
  fast.topology = WorldOf(64, 8);
  table.topology = fast.topology;
  fast.inter_cost = both.model.inter_cost;
  EXPECT_LT(fast.PredictUs(Collective::kAllReduce, Algorithm::kRing, 64 << 20, 64),
            table.PredictUs(Collective::kAllReduce, Algorithm::kRing, 64 << 20, 64));
}

// Ranks a core scale every prediction, as in a crowded real run: its bytes by k for k
// ranks a core, its messages' latency by 1.5k. So an 8-byte call's time grows by about
// 1.5k and a 16 MiB one's by about k, and every other in between.
TEST(SimulateTest, RanksPerCoreScaleLatencyMoreThanBytes) {
  const std::vector<std::string> args = {"--ranks-per-host", "2", "--ranks", "4,8", "-b", "8", "-e", "16M", "-f", "8"};
  std::vector<std::string> crowded_args = args;
  crowded_args.insert(crowded_args.end(), {"--ranks-per-core", "2"});
  const std::vector<Row> alone = Simulate(Parse(args)), crowded = Simulate(Parse(crowded_args));
  ASSERT_EQ(alone.size(), crowded.size());
  int compared = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    for (const auto& prediction : alone[i].predicted) {
      const algos::Algorithm algo = prediction.first;
      const double a = prediction.second;
      const auto c = std::find_if(crowded[i].predicted.begin(), crowded[i].predicted.end(),
                                  [algo](const auto& p) { return p.first == algo; });
      ASSERT_NE(c, crowded[i].predicted.end()) << algos::AlgorithmName(algo);
      if (a <= 0) continue;
      const double factor = c->second / a;
      EXPECT_GE(factor, 2.0 * (1 - 1e-9)) << algos::AlgorithmName(algo) << " " << alone[i].bytes;
      EXPECT_LE(factor, 3.0 * (1 + 1e-9)) << algos::AlgorithmName(algo) << " " << alone[i].bytes;
      if (alone[i].bytes == 8) {
        EXPECT_NEAR(factor, 3.0, 0.05) << algos::AlgorithmName(algo);
      } else if (alone[i].bytes == size_t{16} << 20) {
        EXPECT_NEAR(factor, 2.0, 0.2) << algos::AlgorithmName(algo);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
  // One rank a core or fewer: no change.
  std::vector<std::string> spare_args = args;
  spare_args.insert(spare_args.end(), {"--ranks-per-core", "0.5"});
  EXPECT_EQ(Simulate(Parse(spare_args))[0].chosen_us, alone[0].chosen_us);
  EXPECT_NE(FormatTable(Parse(crowded_args), crowded).find("2.0 ranks a core"), std::string::npos);
}

TEST(SimulateTest, BadFlagsAreNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--inter-gbps", "100Gbit/s"}, "--inter-gbps takes GB/s"},
      {{"--intra-gbps", "0"}, "--intra-gbps must be above 0"},
      {{"--inter-latency-us", "3ms"}, "--inter-latency-us takes microseconds"},
      {{"--inter-latency-us", "-1"}, "must be at least 0 us"},
      {{"--ranks", "16,0,64"}, "--ranks: '0' is not a world size"},
      {{"--ranks", "16,,64"}, "--ranks expects an integer, got ''"},
      {{"--ranks-per-host", "0"}, "--ranks-per-host: '0' is not a number of ranks per host"},
      {{"--colls", "all_reduce,allreduse"}, "unknown collective 'allreduse'"},
      {{"--inter", "ib"}, "--inter expects shm, tcp or rdma, got 'ib'"},
      {{"-b", "1M", "-e", "1K"}, "must be at least 1 and at most -e"},
      {{"-e", "1T"}, "unknown size suffix 'T'"},
      {{"-f", "1"}, "--stepfactor"},
      {{"--ranks"}, "--ranks needs a value"},
      {{"--frobnicate", "1"}, "unknown flag '--frobnicate'"},
      {{"--ranks-per-core", "0"}, "--ranks-per-core takes ranks a core above 0"},
      {{"--ranks-per-core", "2x"}, "--ranks-per-core takes ranks a core above 0"},
  };
  for (const auto& [args, want] : cases) {
    Result<SimOptions> o = ParseSimFlags(args);
    ASSERT_FALSE(o.ok()) << args[0];
    EXPECT_NE(o.status().message().find(want), std::string::npos) << o.status().message();
  }
}

TEST(SimulateTest, SummaryGivesEachAlgorithmsSizes) {
  const SimOptions o = Parse({"--colls", "broadcast", "--ranks", "16", "-b", "8", "-e", "1G", "-f", "8"});
  const std::vector<Row> rows = Simulate(o);
  const std::string summary = FormatSummary(rows);
  EXPECT_NE(summary.find("broadcast on 16 ranks (2 hosts): dissemination 8 B..4 KiB, tree 32 KiB..1 GiB\n"),
            std::string::npos)
      << summary;
  const std::string csv = FormatCsv(rows);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "collective,ranks,hosts,bytes,hierarchical_us,tree_us,chain_us,scatter_allgather_us,dissemination_us,"
            "chosen,chosen_us,"
            "bw_lb_us,lat_lb_us,ratio");
  EXPECT_NE(FormatTable(o, rows).find("ratio = chosen / max(bw_lb, lat_lb)"), std::string::npos);
}

}  // namespace
}  // namespace chorus::simulate
