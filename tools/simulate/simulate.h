// A scale simulator on paper: the selector's own cost model (algos/cost_model.h) asked
// for worlds of many hosts, every candidate's predicted time beside the choice
// Selector::Choose makes and the textbook lower bounds. No formula of its own but the
// bounds; docs/design/cost_model.md says how to run it.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "algos/cost_model.h"
#include "algos/fingerprint.h"
#include "algos/selector.h"
#include "common/status.h"
#include "tools/perf/options.h"

namespace chorus::simulate {

struct SimOptions {
  // The links: the table's rows for these kinds, with any cost given on the command line
  // in their place (CostModel::intra_cost / inter_cost).
  algos::CostModel model;
  int ranks_per_host = 8;
  std::vector<int> world_sizes = {16, 64, 256, 1024, 4096};
  std::vector<algos::Collective> collectives = {algos::Collective::kAllReduce, algos::Collective::kAllGather,
                                                algos::Collective::kReduceScatter, algos::Collective::kBroadcast};
  perf::PerfOptions sweep;  // min_bytes, max_bytes, step_factor (chorus_perf's -b/-e/-f)
  bool csv = false;
  bool help = false;
};

// argv[1..]; an error names the flag and what it takes.
Result<SimOptions> ParseSimFlags(const std::vector<std::string>& args);
std::string SimUsage();

// The textbook lower bounds of one call (microseconds), on the model's terms: a host's
// ranks share its network link, so across hosts the bandwidth bound counts hosts.
struct Bounds {
  double bandwidth_us = 0;
  double latency_us = 0;
  double max() const { return bandwidth_us > latency_us ? bandwidth_us : latency_us; }
};
Bounds LowerBounds(algos::Collective c, size_t bytes, int world_size, int hosts, const algos::LinkCost& intra,
                   const algos::LinkCost& inter);

struct Row {
  algos::Collective collective;
  int world_size = 0;
  int hosts = 0;
  size_t bytes = 0;
  std::vector<std::pair<algos::Algorithm, double>> predicted;  // every candidate, as the selector weighs it
  algos::Algorithm chosen;                                     // Selector::Choose's
  double chosen_us = 0;
  Bounds bounds;
  double ratio() const;  // chosen_us / bounds.max(); 0 where the bound is 0 (one rank, barrier)
};

// The world of `world_size` ranks, `ranks_per_host` to a host in rank order (the last
// host may hold fewer).
algos::Topology WorldOf(int world_size, int ranks_per_host);

// Every collective x world size x size of the options, in that order.
std::vector<Row> Simulate(const SimOptions& options);

std::string FormatTable(const SimOptions& options, const std::vector<Row>& rows);
std::string FormatCsv(const std::vector<Row>& rows);
// Per collective and world size, the sizes in which each algorithm is chosen.
std::string FormatSummary(const std::vector<Row>& rows);

}  // namespace chorus::simulate
