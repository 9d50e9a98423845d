// Test-side view of typed buffers: every element as a double, so references are
// computed exactly (inputs are small integers, exact in every dtype, fp16/bf16
// included) and compared in one place.
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/types.h"

namespace chorus::testing {

// A buffer of `count` elements of `dtype`.
class TypedBuffer {
 public:
  TypedBuffer(DataType dtype, size_t count) : dtype_(dtype), bytes_(count * DataTypeSize(dtype) + 1) {}
  void* data() { return bytes_.data(); }
  size_t count() const { return (bytes_.size() - 1) / DataTypeSize(dtype_); }
  double Get(size_t i) const;
  void Set(size_t i, double v);
  void Fill(double v);

 private:
  DataType dtype_;
  std::vector<unsigned char> bytes_;  // one spare byte so data() is never null
};

bool IsFloat(DataType t);
bool IsUnsigned(DataType t);

// The input of `rank` at element i for a reduction with `op`: small integers whose
// sums (|x| <= 4 per rank), products (x in {1, 2, -1}) and extremes stay exact in
// every dtype for up to 5 ranks.
double ReductionInput(DataType t, ReduceOp op, int rank, size_t i);
// A value that identifies (rank, i) for data-movement collectives, exact in every dtype.
double TagValue(DataType t, int rank, size_t i);
// op over the n ranks' ReductionInput at element i, as the collective must compute
// it (AVG: integer division truncating toward zero for integer dtypes).
double ReductionReference(DataType t, ReduceOp op, int n, size_t i);
// Whether `got` is acceptable for `want` (exact, except AVG on floating point, which
// is allowed the rounding of one multiplication by 1/n in the dtype).
bool Matches(DataType t, ReduceOp op, double got, double want);

}  // namespace chorus::testing
