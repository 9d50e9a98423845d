// Internal entry points of the two kernel paths, behind the validation in reduce.cc.
// Arguments are already checked: valid enums, non-null pointers, count > 0, n >= 2
// for ReduceN. `op` is never kAvg here (the caller maps it to kSum).
//
// Only reduce.cc, the tests and the bench include this header.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace chorus {
namespace kernels {
namespace internal {

// Portable path (reduce_scalar.cc).
void ReduceScalar(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);
void ReduceNScalar(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count);
void ScaleForAvgScalar(DataType dtype, void* buf, size_t count, int n);

// AVX2 path (reduce_avx2.cc, compiled with -mavx2 -mf16c). Call only when
// Avx2Supported() is true. ScaleForAvgAvx2 returns false for dtypes it leaves to the
// scalar path (integers: there is no vector integer division).
void ReduceAvx2(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);
void ReduceNAvx2(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count);
bool ScaleForAvgAvx2(DataType dtype, void* buf, size_t count, int n);

// True when the AVX2 path was compiled in and this CPU (and OS) support AVX2, F16C
// and FMA. Checked once.
bool Avx2Supported();

// Tests and benches: force the portable path even where AVX2 is available, to compare
// the two. Process-wide; not meant to be flipped while other threads reduce.
void SetForceScalarForTesting(bool force);

// The path the public calls take now.
bool UseAvx2();

}  // namespace internal
}  // namespace kernels
}  // namespace chorus
