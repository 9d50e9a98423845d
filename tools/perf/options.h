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

}  // namespace perf
}  // namespace chorus
