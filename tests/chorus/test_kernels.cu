#include <cuda_runtime.h>

#include "kernels/cuda/cuda_error.h"
#include "tests/chorus/test_kernels.h"

namespace chorus::testing {
namespace {

__global__ void AddOneKernel(float* p, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] += 1.0f;
  }
}

// Spins on the global timer (ns), sleeping a microsecond between reads.
__global__ void DelayKernel(uint32_t us) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (uint64_t now = start; now - start < uint64_t{us} * 1000;) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

}  // namespace

Status DelayOnDevice(uint32_t us, void* stream) {
  DelayKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(us);
  return kernels::cuda::CudaError("launching the test's DelayKernel", cudaGetLastError());
}

Status AddOneOnDevice(float* p, size_t n, void* stream) {
  AddOneKernel<<<256, 256, 0, static_cast<cudaStream_t>(stream)>>>(p, n);
  return kernels::cuda::CudaError("launching the test's AddOneKernel", cudaGetLastError());
}

}  // namespace chorus::testing
