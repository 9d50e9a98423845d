// The benchmark loop: for each size of the sweep, time `iters` calls out of place and in
// place through a Backend, check the last result, and report as nccl-tests does.
#pragma once

#include <ostream>
#include <vector>

#include "common/status.h"
#include "tools/perf/backend.h"
#include "tools/perf/options.h"
#include "tools/perf/report.h"

namespace chorus {
namespace perf {

struct RunSummary {
  std::vector<Line> lines;
  int64_t total_wrong = 0;
};

// Runs the sweep on an initialized backend. Only rank 0 writes to `out` and to the
// CSV/JSON files. Every rank must call it with the same options.
Result<RunSummary> RunBenchmark(Backend& backend, const PerfOptions& options, std::ostream& out);

}  // namespace perf
}  // namespace chorus
