// CPU reduction kernels: every DataType x ReduceOp, vectorised with AVX2 (+F16C) when
// the CPU has it (checked once at run time), otherwise a portable scalar loop. Both
// paths give bit-identical results (see elementwise.h for the exact semantics).
//
// AVG: these calls treat kAvg as kSum. A collective applies ScaleForAvg exactly once
// to its final result, so the division happens once, not per reduction step.
//
// Buffers may have any alignment. `dst` may be the same pointer as an input (in-place);
// partially overlapping buffers are not supported. count == 0 is a no-op (pointers
// are not checked then). Calls are stateless and safe from any thread.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "common/types.h"

namespace chorus {
namespace kernels {

// dst[i] = a[i] op b[i] for i in [0, count).
Status Reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// acc[i] = acc[i] op in[i].
Status ReduceInPlace(DataType dtype, ReduceOp op, void* acc, const void* in, size_t count);

// dst[i] = inputs[0][i] op inputs[1][i] op ... op inputs[n-1][i], left to right.
// fp16/bf16 accumulate all n inputs in float and round once at the end. n == 1 copies.
// dst may be one of the inputs.
Status ReduceN(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count);

// buf[i] /= n, the final step of AVG over n ranks. Floating point multiplies by 1/n
// (computed in float for fp32/fp16/bf16, in double for fp64); integers use integer
// division, truncating toward zero (-7 / 2 == -3). n must be >= 1.
Status ScaleForAvg(DataType dtype, void* buf, size_t count, int n);

// The op the element-wise kernels apply: kSum for kAvg, the op itself otherwise.
inline ReduceOp ElementwiseOp(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

// "avx2" or "scalar": the path the calls above take in this process (for logs, benches).
const char* ActiveReduceIsa();

}  // namespace kernels
}  // namespace chorus
