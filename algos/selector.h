// The one seam through which every collective's algorithm is chosen. Given the
// collective, the message size and the world (hosts x ranks, the links between them),
// it predicts each candidate algorithm's time (cost_model.h), takes the lowest and
// returns it with the reason (every prediction), which CHORUS_DEBUG=INFO prints.
// CHORUS_ALGO forces one where it applies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algos/algorithm.h"
#include "algos/cost_model.h"
#include "algos/fingerprint.h"
#include "algos/topology.h"
#include "common/status.h"

namespace chorus::algos {

// Whether the algorithm waits for its input and reports its final output through the
// staging hooks (context.h); device buffers are streamed through host bounce buffers only
// for those, and staged whole before and after the others.
bool Streams(Collective c, Algorithm a);

struct Choice {
  Algorithm algorithm;
  std::string reason;
};

struct SelectorConfig {
  std::optional<Algorithm> forced;  // CHORUS_ALGO; none: the cost model chooses
  // The world (hosts x ranks), its links and the pipelining chunk (CHORUS_CHUNK_BYTES),
  // whose predictions pick the algorithm.
  CostModel model;
};

// What the choice for a call on device buffers depends on besides the size.
struct DevicePlacement {
  bool all_on_this_host = false;  // every rank of the communicator shares this host
  std::string ipc_turned_off;     // non-empty: the ranks that set CHORUS_CUDA_IPC=off ("1, 3")
  std::string ipc_declined;       // non-empty: the ranks found CUDA IPC impossible, and why
  // Non-empty: ranks that share one GPU without MPS ("ranks 0 and 1 share GPU-..."),
  // learnt from a call that ran through CUDA IPC.
  std::string gpu_time_sliced;
  // The call is the stream form (enqueued on a CUDA stream), not the host form.
  bool stream_form = false;
  // Every rank stages stream-form calls with signal flags (no kernel spins on the GPU
  // while a staged call waits), learnt with gpu_time_sliced.
  bool every_rank_signals = false;
  // Calls through CUDA IPC order the ranks' streams with flags (algos/cuda_ipc_sync.h),
  // learnt from the last such call: handing a time-sliced GPU over is then cheap, and no
  // call is staged for it (docs/design/cuda_ipc.md).
  bool ipc_flags = false;
};

// Up to this many bytes a host-form call of ranks that share a GPU without MPS is
// staged where CUDA IPC calls order the streams with interprocess events: their
// processes' work takes turns on the GPU in time slices, and each CUDA IPC call waits
// for its peers' streams across those turns, so small calls are faster staged. With
// flags (the default) CUDA IPC wins at every size and nothing is staged. Bytes;
// measurements in docs/design/cuda_ipc.md.
constexpr size_t kTimeSlicedStagedMaxBytes = 1 << 20;
// The same for the stream form, where every rank stages it with signal flags (bytes).
// Behind the semaphore wait kernel (CHORUS_STAGING_SYNC=kernel) the stream form stays on CUDA IPC at
// every size: the semaphore's spin takes whole turns from the peer's copies.
constexpr size_t kTimeSlicedStreamStagedMaxBytes = 256 << 10;

// all_gather on a power-of-two world of 4 ranks or more: recursive doubling up to this
// many bytes of output (log2(n) steps), the ring above. (The cost model sees no
// difference in bytes between the two; this measured rule decides: fewer steps win up
// to here, not from 8 MiB; docs/design/cost_model.md).
constexpr size_t kAllGatherRdMaxBytes = 4 << 20;

// broadcast: up to this many bytes the data rides the rounds of the agreement on the call
// (Algorithm::kDissemination, agreement.h: BroadcastAgreed), which then costs one
// agreement instead of an agreement and a tree; above, the tree or chain after the
// agreement. Bytes; measured in docs/design/root_agreement.md. Where ranks outnumber
// cores (CostModel::crowding above 1) each round it saves is a wait for the scheduler,
// and it wins further.
// On two ranks it copies nothing (agreement.h), so it runs up to a pipelining chunk,
// below which the tree has nothing to pipeline either.
constexpr size_t kAgreedBroadcastMaxBytes = 16 << 10;
constexpr size_t kAgreedBroadcastCrowdedMaxBytes = 64 << 10;
inline size_t AgreedBroadcastMaxBytes(const CostModel& m, int world_size) {
  const size_t most = m.crowding > 1 ? kAgreedBroadcastCrowdedMaxBytes : kAgreedBroadcastMaxBytes;
  return world_size == 2 ? std::max(most, m.chunk_bytes) : most;
}

// broadcast: scatter + all-gather is weighed from this many ranks. Below, the model,
// which gives each pair of ranks its own bandwidth, misses that it moves more bytes in
// all than the chain; on 4 ranks of one host it measured no faster (cost_model.md).
constexpr int kScatterAllGatherMinRanks = 8;

class Selector {
 public:
  Selector() = default;  // the cost model of one host with TCP between its ranks, nothing forced
  static Result<Selector> Create(const SelectorConfig& config);
  // `explain` false: the reason is left empty (the choice is the same). The reason
  // gives every candidate's predicted time.
  Choice Choose(Collective c, size_t bytes, int world_size, bool explain = true) const;
  // A CUDA-stream call on device buffers: CUDA IPC where every rank is on this host,
  // else what Choose picks, run on host bounce buffers.
  Choice ChooseForDevice(Collective c, size_t bytes, int world_size, const DevicePlacement& where) const;
  // Every candidate that can run the call with its predicted microseconds, in order of
  // preference on a tie: what Choose weighs (tools/simulate prints them).
  std::vector<std::pair<Algorithm, double>> Predict(Collective c, size_t bytes, int world_size) const;
  // The hosts x ranks the selector weighs (what the hierarchical algorithms run on).
  const Topology& topology() const { return config_.model.topology; }
  // The cost model it chooses by (the hierarchical all-reduce's step between hosts too).
  const CostModel& model() const { return config_.model; }

 private:
  // "; predicted: ring 12.0 us, recursive_doubling 9.5 us" (empty where nothing is predicted).
  std::string Predictions(Collective c, size_t bytes, int world_size) const;
  Choice ChooseUncached(Collective c, size_t bytes, int world_size, bool explain) const;
  // f(algorithm, predicted us) for every candidate that can run the call.
  template <typename F>
  void ForEachPrediction(Collective c, size_t bytes, int world_size, F&& f) const;
  explicit Selector(SelectorConfig config, bool has_forced, Algorithm forced);
  SelectorConfig config_;
  bool has_forced_ = false;
  Algorithm forced_ = Algorithm::kRing;
  uint64_t id_ = 0;  // unique per configuration made (copies share it): the last choice is kept per thread
};

}  // namespace chorus::algos
