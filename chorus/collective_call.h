// One collective call as the API received it, validated, then dispatched to the
// algorithm the selector chose.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algos/collectives.h"
#include "algos/fingerprint.h"
#include "algos/selector.h"
#include "common/types.h"

namespace chorus::internal {

// One call's buffers on this rank and how many bytes of each the operation reads
// (send) and writes (recv); 0 where this rank does not use the buffer.
struct DeviceIo {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  bool streamed = false;  // the algorithm uses the staging hooks (algos::Streams)
  // Where streamed: the order the algorithm reads its input in (algos::InputReadOrder),
  // for staging that enqueues the input's copies before the algorithm runs.
  std::vector<std::pair<size_t, size_t>> input_order;
};

struct CollectiveCall {
  algos::Collective kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;

  // Bytes the selector weighs: the whole vector for all_reduce/broadcast/reduce,
  // everything one rank ends with for the gathers and scatters.
  size_t bytes(int world_size) const;
};

// "all_reduce on rank 2", for errors.
std::string CallName(const CollectiveCall& call, int rank);

// Whether the call's largest buffer (count * world_size elements) has a size in bytes
// that fits in size_t; Validate checks it with the rest.
Status CheckSize(const CollectiveCall& call, int world_size);

// The call's buffers on `rank` and the bytes it reads from send and writes to recv
// there (0 where that rank does not use the buffer): what device buffers stage.
DeviceIo CallIo(const CollectiveCall& call, int rank, int world_size);

// The windows a call on device buffers is staged in, one after the other: for
// all_reduce, broadcast and reduce (element by element, so any split is the same
// collective) pieces of at most `window_bytes` (whole elements, at least one), each with
// its buffers advanced to its first element; the call itself otherwise (other kinds,
// window_bytes 0, or a call no larger than one window).
std::vector<CollectiveCall> StagingWindows(const CollectiveCall& call, size_t window_bytes);
// The elements in each of those windows but the last (the call's count where it is one).
size_t WindowElems(const CollectiveCall& call, size_t window_bytes);

// Checks the call against the world: root, dtype, op, null buffers. The error
// names the collective, the rank and what was wrong.
Status Validate(const CollectiveCall& call, int rank, int world_size);
// Runs the chosen algorithm.
Status Dispatch(const algos::Context& ctx, const CollectiveCall& call, algos::Algorithm algorithm,
                const algos::Tuning& tuning);

}  // namespace chorus::internal
