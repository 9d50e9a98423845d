// The test's kernels in a CPU-only build: nothing to launch (the tests that launch
// them skip where no GPU is usable, as they do here).
#include "kernels/cuda/cpu_only.h"
#include "tests/chorus/test_kernels.h"

namespace chorus::testing {

Status AddOneOnDevice(float*, size_t n, void*) {
  return kernels::cuda::BuiltWithoutCuda("the test's AddOneKernel on " + std::to_string(n) + " floats");
}

Status DelayOnDevice(uint32_t us, void*) {
  return kernels::cuda::BuiltWithoutCuda("the test's DelayKernel of " + std::to_string(us) + " us");
}

}  // namespace chorus::testing
