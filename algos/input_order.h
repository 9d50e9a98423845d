// The order in which a streaming algorithm reads its input (byte ranges of the send
// buffer, first read first): the ring all-reduce blocks r, r-1, ..., the ring
// reduce-scatter r-1, r-2, ..., the pairwise all-to-all the blocks for r+1, r+2, ...
// The algorithms announce it through the staging hooks (InputOrder in context.h), and
// staging with every copy enqueued at the call (chorus/signalled_staging.h) needs it
// before the algorithm runs: one function for both. Empty: no particular order (the
// first range waited for, then address order).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "algos/selector.h"
#include "common/types.h"

namespace chorus::algos {

using ByteRanges = std::vector<std::pair<size_t, size_t>>;  // (offset, bytes)

ByteRanges InputReadOrder(Collective c, Algorithm a, int rank, int n, size_t count, DataType dtype);

}  // namespace chorus::algos
