// Input patterns and expected outputs for the #wrong column.
//
// Every input element is a small positive integer that depends on the rank and the
// index, so that sums, products, maxima and minima across a small world are exact in
// every dtype: values are 1..7 (sum of n ranks <= 7n: exact in int8 for n <= 18, in
// bfloat16 for n <= 36, in float16 for n <= 292), and 1..2 for prod (2^n: int8 for
// n <= 6). 0 never occurs, so receive buffers are cleared to 0 before the checked
// iteration and an element a backend forgot to write counts as wrong.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/types.h"
#include "tools/perf/collectives.h"

namespace chorus {
namespace perf {

// Value contributed by `rank` at index `index` of its send buffer.
double InputValue(Collective coll, ReduceOp op, int rank, size_t index);

// The value expected at element `index` of the receive buffer on `rank`; false when that
// element is not significant there (reduce and gather on a non-root rank, barrier).
bool ExpectedValue(Collective coll, ReduceOp op, int rank, int nranks, int root, size_t count, size_t index,
                   double* value);

// Writes the pattern into `send` (shape.send_count elements of dtype).
void FillInput(Collective coll, DataType dtype, ReduceOp op, int rank, size_t send_count, void* send);
// Sets `n` elements of dtype to zero.
void ClearBuffer(DataType dtype, size_t n, void* buf);
// Number of wrong elements among shape.recv_count received ones on `rank`.
int64_t CountWrong(Collective coll, DataType dtype, ReduceOp op, int rank, int nranks, int root, const CollShape& shape,
                   const void* recv);

// Element access in any dtype through double (exact for the small integers used here).
double LoadElement(DataType dtype, const void* buf, size_t i);
void StoreElement(DataType dtype, void* buf, size_t i, double v);
// IEEE binary16 / bfloat16 conversions (round to nearest even).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

}  // namespace perf
}  // namespace chorus
