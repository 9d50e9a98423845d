// CUDA reduction kernels: every DataType x ReduceOp of the CPU kernels (reduce.h), on
// device buffers, enqueued on a CUDA stream. The element-wise arithmetic is the CPU's
// (elementwise.h, compiled __host__ __device__), so both paths give the same bits.
//
// No CUDA header here: streams are passed as void* (a cudaStream_t; null = the legacy
// default stream). The library links CUDA's static runtime and works on machines with
// no GPU or no driver: DeviceStatus() then says so, and every call returns that error.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "common/types.h"

namespace chorus::kernels::cuda {

// OK when a CUDA device is usable; else kUnavailable "no CUDA device (...)" with the
// runtime's reason (no driver, no device). Checked once per process.
const Status& DeviceStatus();  // probed once; a reference, so a check copies nothing
// Number of visible devices (0 when DeviceStatus() is not OK).
int DeviceCount();
// False in a CPU-only build (no toolkit, or --config=cpu_only: cpu_only.cc), where
// DeviceStatus() and every device call fail with "chorus was built without CUDA".
bool BuiltWithCuda();

// Loads every kernel of chorus's onto the current device now. Under CUDA's lazy
// loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) a kernel's first
// launch loads its module under the context's lock and waits for the device to drain:
// launched while a staged call holds a stream (its semaphore) it would wait for that call,
// and the call's copies for the lock. Done once per device before any semaphore is held.
Status LoadKernels();

// dst[i] = a[i] op b[i]; dst may equal a or b. AVG is SUM here (ScaleForAvg divides once).
Status Reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream);

// dst[i] = inputs[0][i] op ... op inputs[n-1][i], left to right in one pass; fp16/bf16
// accumulate in float and round once. `inputs` is a host array of n device pointers
// (they may be on peer GPUs mapped by CUDA IPC); 1 <= n <= kMaxInputs.
constexpr int kMaxInputs = 16;
Status ReduceN(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count, void* stream);

// The same reduction written to each of the m buffers `dsts` (1 <= m <= kMaxInputs;
// peers' buffers mapped by CUDA IPC too) in one pass: every input read once, every
// output written once. AVG is divided by n here (the bits of ReduceN + ScaleForAvg).
Status ReduceNToAll(DataType dtype, ReduceOp op, void* const* dsts, int m, const void* const* inputs, int n,
                    size_t count, void* stream);

// buf[i] /= n (AVG's last step), exactly as the CPU's ScaleForAvg.
Status ScaleForAvg(DataType dtype, void* buf, size_t count, int n, void* stream);

}  // namespace chorus::kernels::cuda
