#include "algos/selector.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>

#include "algos/chunking.h"

namespace chorus::algos {
namespace {

// The algorithms that can run each collective, the first being the default.
bool Supports(Collective c, Algorithm a) {
  switch (c) {
    case Collective::kAllReduce:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling || a == Algorithm::kHierarchical ||
             a == Algorithm::kRabenseifner || a == Algorithm::kTree;
    case Collective::kAllGather:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling || a == Algorithm::kHierarchical;
    case Collective::kReduceScatter: return a == Algorithm::kRing || a == Algorithm::kHierarchical;
    case Collective::kBroadcast:
      return a == Algorithm::kTree || a == Algorithm::kChain || a == Algorithm::kScatterAllGather ||
             a == Algorithm::kDissemination || a == Algorithm::kHierarchical;
    case Collective::kReduce: return a == Algorithm::kTree || a == Algorithm::kHierarchical;
    case Collective::kGather:
    case Collective::kScatter: return a == Algorithm::kLinear;
    case Collective::kAllToAll: return a == Algorithm::kPairwise;
    case Collective::kBarrier: return a == Algorithm::kDissemination;
  }
  return false;
}

// Whether `a` can run `c` on `world_size` ranks (all_gather's recursive doubling: a
// power of two; the hierarchical ones: >= 2 hosts, one of >= 2 ranks; all_gather's and
// reduce_scatter's: as many ranks on every host).
bool Fits(Collective c, Algorithm a, int world_size, const Topology& topo) {
  if (a == Algorithm::kHierarchical) {
    return topo.size() == world_size && topo.num_hosts() > 1 && topo.max_local() > 1 &&
           ((c != Collective::kAllGather && c != Collective::kReduceScatter) || topo.even());
  }
  return !(c == Collective::kAllGather && a == Algorithm::kRecursiveDoubling && !IsPowerOfTwo(world_size));
}

// Every algorithm the cost model weighs, in order of preference on a tie.
constexpr Algorithm kCandidates[] = {Algorithm::kRing,
                                     Algorithm::kRecursiveDoubling,
                                     Algorithm::kHierarchical,
                                     Algorithm::kRabenseifner,
                                     Algorithm::kTree,
                                     Algorithm::kChain,
                                     Algorithm::kScatterAllGather,
                                     Algorithm::kLinear,
                                     Algorithm::kPairwise,
                                     Algorithm::kDissemination};

Algorithm OnlyAlgorithm(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter: return Algorithm::kRing;
    case Collective::kBroadcast:
    case Collective::kReduce: return Algorithm::kTree;
    case Collective::kGather:
    case Collective::kScatter: return Algorithm::kLinear;
    case Collective::kAllToAll: return Algorithm::kPairwise;
    case Collective::kBarrier: return Algorithm::kDissemination;
  }
  return Algorithm::kRing;
}

// Each configuration made gets its own id (see Choose).
std::atomic<uint64_t> next_selector_id{1};

}  // namespace

bool Streams(Collective c, Algorithm a) {
  // all_reduce's recursive doubling runs on small buffers, whole, Rabenseifner on whole
  // halves, the tree on both halves at once and broadcast's dissemination on small
  // buffers; the barrier moves no data; CUDA IPC does not stage; broadcast's
  // scatter-allgather moves whole subtrees' blocks.
  return c != Collective::kBarrier && a != Algorithm::kDissemination && a != Algorithm::kCudaIpc &&
         a != Algorithm::kHierarchical && a != Algorithm::kScatterAllGather &&
         !(c == Collective::kAllReduce &&
           (a == Algorithm::kRecursiveDoubling || a == Algorithm::kRabenseifner || a == Algorithm::kTree));
}

Selector::Selector(SelectorConfig config, bool has_forced, Algorithm forced)
    : config_(std::move(config)), has_forced_(has_forced), forced_(forced), id_(next_selector_id.fetch_add(1)) {}

Result<Selector> Selector::Create(const SelectorConfig& config) {
  return Selector(config, config.forced.has_value(), config.forced.value_or(Algorithm::kRing));
}

template <typename F>
void Selector::ForEachPrediction(Collective c, size_t bytes, int world_size, F&& f) const {
  for (Algorithm a : kCandidates) {
    if (!Supports(c, a) || !Fits(c, a, world_size, config_.model.topology)) continue;
    const double us = config_.model.PredictUs(c, a, bytes, world_size);
    if (us >= 0) f(a, us);
  }
}

Choice Selector::Choose(Collective c, size_t bytes, int world_size, bool explain) const {
  // Every call chooses; most repeat the last call's choice. A choice depends only on
  // the selector and (c, bytes, world_size); the reason is made afresh when asked for.
  struct Last {
    uint64_t selector = UINT64_MAX;  // none yet
    Collective c{};
    size_t bytes = 0;
    int world_size = 0;
    Algorithm algorithm{};
  };
  thread_local Last last;
  if (!explain && last.selector == id_ && last.c == c && last.bytes == bytes && last.world_size == world_size) {
    return Choice{last.algorithm, std::string()};
  }
  Choice chosen = ChooseUncached(c, bytes, world_size, explain);
  last = Last{id_, c, bytes, world_size, chosen.algorithm};
  return chosen;
}

Choice Selector::ChooseUncached(Collective c, size_t bytes, int world_size, bool explain) const {
  // The reason is made only where asked for: every call chooses, few explain, and
  // building it costs a small call dearly (docs/design/cost_model.md).
  const auto because = [explain](Algorithm a, const auto& why) { return Choice{a, explain ? why() : std::string()}; };
  const CostModel& m = config_.model;
  if (has_forced_ && Supports(c, forced_) && Fits(c, forced_, world_size, m.topology)) {
    return because(forced_, [&] {
      return "forced by CHORUS_ALGO=" + std::string(AlgorithmName(forced_)) + Predictions(c, bytes, world_size);
    });
  }
  const auto where = [&] {
    return m.topology.size() == world_size ? m.topology.Describe() : std::to_string(world_size) + " ranks";
  };
  const auto note = [&]() -> std::string {
    if (!has_forced_) return "";
    return " (CHORUS_ALGO=" + std::string(AlgorithmName(forced_)) +
           (Supports(c, forced_) ? " cannot run " + std::string(CollectiveName(c)) + " on " + where()
                                 : " does not apply to " + std::string(CollectiveName(c))) +
           ")";
  };
  if (c == Collective::kAllGather) {
    const bool rd = world_size >= 4 && IsPowerOfTwo(world_size) && bytes <= kAllGatherRdMaxBytes;
    const Algorithm flat = rd ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
    // Over hosts, the hierarchical one where the model predicts it faster than the flat choice.
    if (Fits(c, Algorithm::kHierarchical, world_size, m.topology)) {
      const double hier = m.PredictUs(c, Algorithm::kHierarchical, bytes, world_size);
      if (hier >= 0 && hier < m.PredictUs(c, flat, bytes, world_size)) {
        return because(Algorithm::kHierarchical, [&] {
          return std::to_string(bytes) + " B on " + where() + " (" + LinkName(m.intra) + " within hosts, " +
                 LinkName(m.inter) + " between): hierarchical, predicted faster than " + AlgorithmName(flat) +
                 Predictions(c, bytes, world_size) + note();
        });
      }
    }
    return because(flat, [&] {
      return std::to_string(bytes) + " B on " + std::to_string(world_size) +
             (rd ? " ranks (a power of two, at most " + std::to_string(kAllGatherRdMaxBytes) + " B): recursive doubling"
                 : " ranks: ring, pipelined in chunks") +
             Predictions(c, bytes, world_size) + note();
    });
  }
  if (c == Collective::kBroadcast && bytes <= AgreedBroadcastMaxBytes(m, world_size)) {
    return because(Algorithm::kDissemination, [&] {
      return std::to_string(bytes) + " B on " + where() + " (at most " +
             std::to_string(AgreedBroadcastMaxBytes(m, world_size)) +
             " B): dissemination, the data in the rounds that agree on the call" + Predictions(c, bytes, world_size) +
             note();
    });
  }
  // The candidate predicted fastest; on a tie the default, else the first in
  // kCandidates' order (a hierarchical reduce on links all alike ties the flat tree).
  Algorithm best = OnlyAlgorithm(c);
  double best_us = -1;
  ForEachPrediction(c, bytes, world_size, [&](Algorithm a, double us) {
    if (best_us < 0 || us < best_us || (us == best_us && a == OnlyAlgorithm(c))) {
      best = a;
      best_us = us;
    }
  });
  return because(best, [&] {
    const bool hosts = m.topology.size() == world_size && m.topology.num_hosts() > 1;
    return std::to_string(bytes) + " B on " + where() + " (" + LinkName(m.intra) + " within hosts" +
           (hosts ? std::string(", ") + LinkName(m.inter) + " between" : std::string()) + "): lowest predicted time" +
           Predictions(c, bytes, world_size) + note();
  });
}

std::vector<std::pair<Algorithm, double>> Selector::Predict(Collective c, size_t bytes, int world_size) const {
  std::vector<std::pair<Algorithm, double>> out;
  ForEachPrediction(c, bytes, world_size, [&](Algorithm a, double us) { out.emplace_back(a, us); });
  return out;
}

std::string Selector::Predictions(Collective c, size_t bytes, int world_size) const {
  std::string out;
  ForEachPrediction(c, bytes, world_size, [&](Algorithm a, double us) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s %.1f us", AlgorithmName(a), us);
    out += (out.empty() ? "; predicted: " : ", ") + std::string(buf);
  });
  return out;
}

Choice Selector::ChooseForDevice(Collective c, size_t bytes, int world_size, const DevicePlacement& where) const {
  std::string why_not;
  // Ranks taking turns on a GPU whose CUDA IPC calls hand it over with events.
  const bool sliced_events = !where.gpu_time_sliced.empty() && !where.ipc_flags;
  if (world_size < 2) {
    why_not = "one rank";
  } else if (!where.all_on_this_host) {
    why_not = "not every rank is on this host";
  } else if (!where.ipc_turned_off.empty()) {
    why_not = "CHORUS_CUDA_IPC=off on rank " + where.ipc_turned_off;
  } else if (!where.ipc_declined.empty()) {
    why_not = "CUDA IPC declined: " + where.ipc_declined;
  } else if (sliced_events && !where.stream_form && bytes <= kTimeSlicedStagedMaxBytes) {
    why_not = where.gpu_time_sliced + ", whose turns in time slices cost a CUDA IPC call more than staging up to " +
              std::to_string(kTimeSlicedStagedMaxBytes >> 20) + " MiB (host form)";
  } else if (sliced_events && where.stream_form && where.every_rank_signals &&
             bytes <= kTimeSlicedStreamStagedMaxBytes) {
    why_not = where.gpu_time_sliced + ", whose turns in time slices cost a CUDA IPC call more than staging up to " +
              std::to_string(kTimeSlicedStreamStagedMaxBytes >> 10) + " KiB (stream form, signal flags on every rank)";
  } else {
    return {Algorithm::kCudaIpc, "device buffers, all " + std::to_string(world_size) +
                                     " ranks on this host: CUDA IPC (each rank reads its peers' buffers directly)"};
  }
  Choice host = Choose(c, bytes, world_size);
  host.reason = "device buffers staged through host memory (" + why_not + "); " + host.reason;
  return host;
}

}  // namespace chorus::algos
