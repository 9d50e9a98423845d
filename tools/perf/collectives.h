// The collectives chorus_perf measures, and the per-collective facts the harness
// needs: buffer shapes (nccl-tests conventions), in-place layouts and bus-bandwidth
// factors. Pure functions, unit-tested in tests/perf.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace chorus {
namespace perf {

enum class Collective {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kBarrier,
  kGather,
  kScatter,
};

const char* CollectiveName(Collective c);  // "all_reduce", "broadcast", ...
// Accepts the names above, with or without '_' ("allreduce", "all_reduce").
Result<Collective> ParseCollective(const std::string& name);
const std::vector<Collective>& AllCollectives();

// Whether the collective takes a reduction op / a root (for the redop and root columns).
bool HasReduceOp(Collective c);
bool HasRoot(Collective c);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
//   all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n;
//   broadcast, reduce, sendrecv 1; barrier 0 (it moves no payload).
double BusBwFactor(Collective c, int nranks);

// Buffer shapes for one line of the sweep, all in elements. Like nccl-tests, the
// requested size is the size of the largest buffer; for the collectives that split a
// buffer in per-rank blocks it is rounded down to a multiple of nranks (at least one
// element per rank).
struct CollShape {
  size_t send_count = 0;   // elements in the send buffer
  size_t recv_count = 0;   // elements in the receive buffer
  size_t param_count = 0;  // the `count` passed to the Backend call (the "count" column)
  // In-place run: one buffer of max(send_count, recv_count) elements; the send and
  // receive pointers are base + these offsets (nccl-tests layouts, e.g. all_gather sends
  // from its own block of the output, reduce_scatter receives into its block of the input).
  size_t inplace_send_offset = 0;
  size_t inplace_recv_offset = 0;
  size_t bytes = 0;  // the "size" column: the largest buffer in bytes
};

CollShape ShapeFor(Collective c, size_t requested_bytes, DataType dtype, int nranks, int rank);

}  // namespace perf
}  // namespace chorus
