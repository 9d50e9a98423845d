// The one seam through which every collective's algorithm is chosen. Given the
// collective, the message size and the world size (and later the topology), it
// returns an algorithm and the reason, which CHORUS_DEBUG=INFO prints.
// CHORUS_ALGO forces one where it applies.
#pragma once

#include <cstddef>
#include <string>

#include "algos/fingerprint.h"
#include "chorus/status.h"

namespace chorus::algos {

enum class Algorithm {
  kRing,               // all_reduce, all_gather, reduce_scatter
  kRecursiveDoubling,  // all_reduce
  kTree,               // broadcast, reduce (binomial, pipelined)
  kLinear,             // gather, scatter
  kPairwise,           // all_to_all
  kDissemination,      // barrier
  kCudaIpc,            // every collective on device buffers, all ranks on one host (cuda_ipc_collectives.h)
};

const char* AlgorithmName(Algorithm a);
// Whether the algorithm waits for its input and reports its final output through the
// staging hooks (context.h); device buffers are streamed through host stand-ins only
// for those, and staged whole before and after the others.
bool Streams(Collective c, Algorithm a);
Result<Algorithm> ParseAlgorithm(const std::string& name);

struct Choice {
  Algorithm algorithm;
  std::string reason;
};

struct SelectorConfig {
  std::string forced;  // CHORUS_ALGO: "", "ring", "recursive_doubling" (or "rd"), "tree", ...
  // all_reduce: recursive doubling up to this many bytes, ring above (CHORUS_RD_MAX_BYTES).
  size_t allreduce_rd_max_bytes = 64 << 10;
};

// What the choice for a call on device buffers depends on besides the size.
struct DevicePlacement {
  bool all_on_this_host = false;  // every rank of the communicator shares this host
  std::string ipc_turned_off;     // non-empty: the ranks that set CHORUS_CUDA_IPC=off ("1, 3")
  std::string ipc_declined;       // non-empty: the ranks found CUDA IPC impossible, and why
};

class Selector {
 public:
  Selector() = default;  // the size rule with default thresholds, nothing forced
  static Result<Selector> Create(const SelectorConfig& config);
  Choice Choose(Collective c, size_t bytes, int world_size) const;
  // A CUDA-stream call on device buffers: CUDA IPC where every rank is on this host,
  // else what Choose picks, run on host stand-ins of the buffers.
  Choice ChooseForDevice(Collective c, size_t bytes, int world_size, const DevicePlacement& where) const;

 private:
  explicit Selector(SelectorConfig config, bool has_forced, Algorithm forced)
      : config_(std::move(config)), has_forced_(has_forced), forced_(forced) {}
  SelectorConfig config_;
  bool has_forced_ = false;
  Algorithm forced_ = Algorithm::kRing;
};

}  // namespace chorus::algos
