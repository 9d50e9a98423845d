#include "algos/selector.h"

#include <strings.h>

#include <algorithm>
#include <string>

#include "algos/chunking.h"

namespace chorus::algos {
namespace {

// The algorithms that can run each collective, the first being the default.
bool Supports(Collective c, Algorithm a) {
  switch (c) {
    case Collective::kAllReduce: return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling;
    case Collective::kAllGather: return a == Algorithm::kRing || a == Algorithm::kRecursiveDoubling;
    case Collective::kReduceScatter: return a == Algorithm::kRing;
    case Collective::kBroadcast: return a == Algorithm::kTree || a == Algorithm::kChain;
    case Collective::kReduce: return a == Algorithm::kTree;
    case Collective::kGather:
    case Collective::kScatter: return a == Algorithm::kLinear;
    case Collective::kAllToAll: return a == Algorithm::kPairwise;
    case Collective::kBarrier: return a == Algorithm::kDissemination;
  }
  return false;
}

// Whether `a` can run `c` on `world_size` ranks (all_gather's recursive doubling: a
// power of two).
bool Fits(Collective c, Algorithm a, int world_size) {
  return !(c == Collective::kAllGather && a == Algorithm::kRecursiveDoubling && !IsPowerOfTwo(world_size));
}

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

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kTree: return "tree";
    case Algorithm::kChain: return "chain";
    case Algorithm::kLinear: return "linear";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kCudaIpc: return "cuda_ipc";
  }
  return "unknown";
}

bool Streams(Collective c, Algorithm a) {
  // all_reduce's recursive doubling runs on small buffers, whole; the barrier moves no
  // data; CUDA IPC does not stage.
  return c != Collective::kBarrier && a != Algorithm::kCudaIpc &&
         !(c == Collective::kAllReduce && a == Algorithm::kRecursiveDoubling);
}

Result<Algorithm> ParseAlgorithm(const std::string& name) {
  const Algorithm all[] = {Algorithm::kRing,   Algorithm::kRecursiveDoubling, Algorithm::kTree,
                           Algorithm::kChain,  Algorithm::kLinear,            Algorithm::kPairwise,
                           Algorithm::kDissemination};
  if (strcasecmp(name.c_str(), "rd") == 0) return Algorithm::kRecursiveDoubling;
  for (Algorithm a : all) {
    if (strcasecmp(name.c_str(), AlgorithmName(a)) == 0) return a;
  }
  return InvalidArgument("CHORUS_ALGO='" + name +
                         "' is not an algorithm (ring, recursive_doubling|rd, tree, chain, linear, pairwise, "
                         "dissemination)");
}

Result<Selector> Selector::Create(const SelectorConfig& config) {
  if (config.forced.empty()) return Selector(config, false, Algorithm::kRing);
  Result<Algorithm> a = ParseAlgorithm(config.forced);
  if (!a.ok()) return a.status();
  return Selector(config, true, a.value());
}

Choice Selector::Choose(Collective c, size_t bytes, int world_size, bool explain) const {
  // The reason is made only where asked for: every call chooses, few explain (building
  // it was a sixth of an 8-byte broadcast's instructions outside the kernel).
  const auto because = [explain](Algorithm a, const auto& why) { return Choice{a, explain ? why() : std::string()}; };
  if (has_forced_ && Supports(c, forced_) && Fits(c, forced_, world_size)) {
    return because(forced_, [&] { return "forced by CHORUS_ALGO=" + config_.forced; });
  }
  const auto note = [&]() -> std::string {
    if (!has_forced_) return "";
    return " (CHORUS_ALGO=" + config_.forced +
           (Supports(c, forced_) ? " needs a power-of-two world for " : " does not apply to ") + CollectiveName(c) +
           ")";
  };
  switch (c) {
    case Collective::kAllReduce:
      if (world_size > 1 && bytes <= config_.allreduce_rd_max_bytes) {
        return because(Algorithm::kRecursiveDoubling, [&] {
          return std::to_string(bytes) + " B <= " + std::to_string(config_.allreduce_rd_max_bytes) +
                 " B: latency-bound, log2(n) steps" + note();
        });
      }
      return because(Algorithm::kRing, [&] {
        return std::to_string(bytes) + " B > " + std::to_string(config_.allreduce_rd_max_bytes) +
               " B: bandwidth-bound, ring sends 2(n-1)/n of the data" + note();
      });
    case Collective::kAllGather:
      if (world_size >= 4 && IsPowerOfTwo(world_size) && bytes <= kAllGatherRdMaxBytes) {
        return because(Algorithm::kRecursiveDoubling, [&] {
          return std::to_string(bytes) + " B <= " + std::to_string(kAllGatherRdMaxBytes) +
                 " B on a power-of-two world: latency-bound, log2(n) steps" + note();
        });
      }
      return because(Algorithm::kRing, [&] {
        return std::to_string(bytes) + " B on " + std::to_string(world_size) + " ranks: ring, pipelined in chunks" +
               note();
      });
    case Collective::kBroadcast: {
      // Of C chunks on n ranks, the chain delivers the last after about (n - 2) + C
      // chunk times, the binomial tree after about ceil(log2 n) * C (its root sends
      // every chunk to each of its children in turn). 3 and 4 ranks on 2 cores, loopback
      // (2026-11-26): the chain took 0.36-0.40 ms for 2 MiB on 3 ranks against the
      // tree's 0.61-0.64, 1.4-1.5 ms for 4 MiB on 4 ranks against 2.0-2.1.
      const size_t chunk = std::max<size_t>(1, config_.chunk_bytes);
      const size_t chunks = std::max<size_t>(1, (bytes + chunk - 1) / chunk);
      size_t depth = 0;  // ceil(log2 n)
      while ((size_t{1} << depth) < static_cast<size_t>(world_size)) ++depth;
      const size_t chain = static_cast<size_t>(std::max(world_size - 2, 0)) + chunks, tree = depth * chunks;
      return because(world_size > 2 && chain < tree ? Algorithm::kChain : Algorithm::kTree, [&] {
        return std::to_string(bytes) + " B in " + std::to_string(chunks) + " chunks of " + std::to_string(chunk) +
               " B on " + std::to_string(world_size) + " ranks: chain ~" + std::to_string(chain) +
               " chunk times, binomial tree ~" + std::to_string(tree) + note();
      });
    }
    default:
      return because(OnlyAlgorithm(c),
                     [&] { return std::string("the only algorithm for ") + CollectiveName(c) + note(); });
  }
}

Choice Selector::ChooseForDevice(Collective c, size_t bytes, int world_size, const DevicePlacement& where) const {
  std::string why_not;
  // Ranks taking turns on a GPU whose CUDA IPC calls hand it over with events.
  const bool sliced_events = !where.gpu_time_sliced.empty() && !where.ipc_words;
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
              std::to_string(kTimeSlicedStreamStagedMaxBytes >> 10) + " KiB (stream form, signal words on every rank)";
  } else {
    return {Algorithm::kCudaIpc, "device buffers, all " + std::to_string(world_size) +
                                     " ranks on this host: CUDA IPC (each rank reads its peers' buffers directly)"};
  }
  Choice host = Choose(c, bytes, world_size);
  host.reason = "device buffers staged through host memory (" + why_not + "); " + host.reason;
  return host;
}

}  // namespace chorus::algos
