// How long a collective takes by each algorithm that can run it, predicted from the
// links' latency and bandwidth (kLinkCosts, one row per transport) and each
// algorithm's steps and bytes. The selector takes the lowest prediction; Explain
// prints every candidate's beside the choice.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "algos/fingerprint.h"
#include "algos/topology.h"

namespace chorus::algos {

enum class Algorithm;

enum class LinkKind { kShm, kTcp, kRdma };
const char* LinkName(LinkKind k);

// One transport between two ranks: what a message costs before its first byte lands
// (the call's own overhead included), and the rate of its bytes after.
struct LinkCost {
  double latency_us;  // per message
  double gbps;        // GB/s, one direction, one pair of ranks
};
const LinkCost& CostOf(LinkKind k);

struct CostModel {
  Topology topology;
  LinkKind intra = LinkKind::kTcp;  // between the ranks of one host
  LinkKind inter = LinkKind::kTcp;  // between hosts
  // Given costs in place of the table's rows for `intra` and `inter` (tools/simulate);
  // real runs leave them unset.
  std::optional<LinkCost> intra_cost, inter_cost;
  size_t chunk_bytes = 512 << 10;  // the algorithms' pipelining chunk
  // Ranks per core k on the most crowded machine (1: a core each). There a prediction's
  // bytes take k times as long and its messages' latency more than that (each is a wait
  // for the scheduler), so algorithms of fewer steps gain.
  double crowding = 1.0;

  // Predicted microseconds of collective `c` of `bytes` (as Selector::Choose counts
  // them) by algorithm `a` on `world_size` ranks; negative where `a` cannot run it
  // there, or is not weighed for it (Rabenseifner above four chunks). A world other
  // than the topology's is taken as one host of `intra` links.
  double PredictUs(Collective c, Algorithm a, size_t bytes, int world_size) const;
  // The links' costs the predictions use: the overrides where set, else the table's.
  LinkCost IntraCost() const { return intra_cost.value_or(CostOf(intra)); }
  LinkCost InterCost() const { return inter_cost.value_or(CostOf(inter)); }
  // The hierarchical all-reduce's step between hosts: among `hosts` ranks, one a host,
  // `bytes` each, the link between hosts shared by `sharing` ranks of each host at once.
  // The flat all-reduce predicted fastest (recursive doubling, Rabenseifner, the ring or
  // the tree) and its microseconds.
  std::pair<Algorithm, double> AcrossHosts(size_t bytes, int hosts, int sharing) const;
  // The hierarchical broadcast's steps: a broadcast of `bytes` among `ranks` ranks over
  // the links between hosts (`across`) or within one. The flat broadcast predicted
  // fastest (the tree, the chain or scatter-allgather) and its microseconds, without
  // the agreement on the call (the whole world's, made once before).
  std::pair<Algorithm, double> BroadcastAmong(size_t bytes, int ranks, bool across) const;

 private:
  double PredictUncrowded(Collective c, Algorithm a, size_t bytes, int world_size) const;
  // Rabenseifner's all-reduce of `s` bytes among `n` ranks over `l`; negative where it is
  // not weighed (above four chunks).
  double RabenseifnerUs(int n, double s, const LinkCost& l) const;
};

}  // namespace chorus::algos
