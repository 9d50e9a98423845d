// Barrier: dissemination (Hensgen, Finkel, Manber). In round k every rank signals
// rank + 2^k and waits for rank - 2^k; after ceil(log2 n) rounds every rank has
// heard, directly or transitively, from every other.
#pragma once

#include "algos/context.h"

namespace chorus::algos {

Status Barrier(const Context& ctx);

}  // namespace chorus::algos
