// Gloo (the CPU collectives library PyTorch's "gloo" process group uses) behind the
// chorus_perf Backend interface. Registered as "gloo".
//
// Rendezvous: chorus's store (rendezvous/) served by rank 0 at MASTER_ADDR:MASTER_PORT (or gloo's
// FileStore when --gloo-store DIR is given); data over gloo's TCP transport bound to
// CHORUS_SOCKET_IFNAME, or to the local address that routes to MASTER_ADDR.
//
// all_reduce variants (--algo): ring (default; gloo::allreduce RING, what PyTorch
// uses), bcube (gloo::allreduce BCUBE), ring_chunked, halving_doubling, ring_legacy
// (gloo's older in-place algorithm classes AllreduceRingChunked, AllreduceHalvingDoubling,
// AllreduceRing). reduce_scatter uses ReduceScatterHalvingDoubling.
// dtypes: float32, float64, float16, int8, uint8, int32, int64 (no bfloat16);
// ops: sum, prod, max, min (no avg).
//
// Where gloo cannot take the caller's buffers as they are (an in-place layout gloo does
// not accept, or the in-place-only legacy classes run out of place) the backend copies
// through a scratch buffer; that copy is part of the measured time, as it would be for
// a user of gloo.
#pragma once

#include <memory>

#include "tools/perf/backend.h"

namespace chorus {
namespace perf {

std::unique_ptr<Backend> MakeGlooBackend();

}  // namespace perf
}  // namespace chorus
