// chorus_perf's command line, nccl-tests style. Parsing is pure (argv in, options or a
// Status naming the bad flag out) so it is unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "tools/perf/collectives.h"

namespace chorus {
namespace perf {

struct PerfOptions {
  Collective coll = Collective::kAllReduce;
  std::string backend = "chorus";
  std::string algo;  // backend-specific; empty = backend default
  int64_t min_bytes = 8;
  int64_t max_bytes = 32 << 20;
  int64_t step_factor = 2;  // multiplicative step (nccl-tests -f)
  int64_t step_bytes = 0;   // additive step (nccl-tests -i); used when > 0
  int iters = 20;
  int warmup_iters = 5;
  int64_t iter_bytes = 0;  // --iter-bytes: small sizes run more iterations (IterationsAt)
  bool check = true;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::string csv_path;
  std::string json_path;
  bool progress = false;
  std::string store;      // gloo rendezvous: empty = TCP store at MASTER_ADDR:MASTER_PORT, else a directory
  int timeout_s = 120;    // per-operation timeout for backends that support one
  bool device = false;    // buffers in CUDA device memory (implied by --backend nccl)
  bool blocking = false;  // --blocking: with --device, wait for every call (default: stream order, one wait a loop)
  std::string nccl_lib;   // --nccl-lib: NCCL to dlopen (default CHORUS_PERF_NCCL_LIB, else libnccl.so.2)
  bool help = false;
};

// Parses argv[1..]. The collective is `--coll NAME` (alias `--op_name`) or a leading
// positional subcommand (`chorus_perf all_reduce -b 8 -e 1M`). Sizes take K/M/G suffixes.
Result<PerfOptions> ParseFlags(const std::vector<std::string>& args);
std::string UsageText();

// The sweep of sizes in bytes: min, then *factor (or +step_bytes) while <= max.
std::vector<int64_t> SizeSweep(const PerfOptions& options);

// Timed iterations at a size: --iters, or with --iter-bytes B enough for B bytes, at
// most kMaxIterScale times --iters, so that a sub-microsecond call is not timed over a
// few microseconds. Warmups scale alike. Every rank computes the same from its flags.
constexpr int kMaxIterScale = 100;
int IterationsAt(const PerfOptions& options, int64_t bytes);
int WarmupsAt(const PerfOptions& options, int64_t bytes);

}  // namespace perf
}  // namespace chorus
