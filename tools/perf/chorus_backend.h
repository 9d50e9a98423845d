// chorus itself behind the chorus_perf Backend interface. Registered as "chorus".
//
// Rendezvous: tcp://MASTER_ADDR:MASTER_PORT with RANK/WORLD_SIZE from the environment
// (torchrun's names, the same the gloo backend reads), so one launch line serves every
// backend. Only one backend runs per process, so chorus's store can take MASTER_PORT
// itself. The rest of the configuration is chorus's own (CHORUS_* variables, read once):
// CHORUS_ALGO passes through, `--algo` overrides it for this run, CHORUS_SOCKET_IFNAME
// picks the interface and `--timeout` bounds every operation and the set-up.
//
// Every collective, dtype (float32, float64, float16, bfloat16, int8, uint8, int32,
// int64) and op (sum, prod, max, min, avg) chorus has. Buffers go to chorus as the
// harness lays them out (chorus accepts nccl-tests' in-place layouts); the two places
// chorus's API differs from NCCL's cost a copy that is part of the measured time:
// broadcast out of place (chorus broadcasts one buffer: the root copies send into recv
// first) and sendrecv in place (chorus has no fused sendrecv: ISend + IRecv, through a
// scratch copy when the buffers overlap).
#pragma once

#include <memory>

#include "tools/perf/backend.h"

namespace chorus {
namespace perf {

std::unique_ptr<Backend> MakeChorusBackend();

}  // namespace perf
}  // namespace chorus
