// A kernel of the test's own, which nothing loads before its first launch: what a
// program's kernel is under CUDA's lazy loading (device_api_test's signals test).
#pragma once

#include <cstddef>

#include "chorus/status.h"

namespace chorus::testing {

// p[i] += 1 for i < n, enqueued on `stream`.
Status AddOneOnDevice(float* p, size_t n, void* stream);

}  // namespace chorus::testing
