// Kernels of the test's own, which nothing loads before their first launch: what a
// program's kernels are under CUDA's lazy loading (device_api_test).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace chorus::testing {

// p[i] += 1 for i < n, enqueued on `stream`.
Status AddOneOnDevice(float* p, size_t n, void* stream);

// Holds `stream` about `us` microseconds (one thread, __nanosleep): what a long kernel
// of the caller's would.
Status DelayOnDevice(uint32_t us, void* stream);

}  // namespace chorus::testing
