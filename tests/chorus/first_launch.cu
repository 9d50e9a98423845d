#include <cuda_runtime.h>

#include "kernels/cuda/cuda_error.h"
#include "tests/chorus/first_launch.h"

namespace chorus::testing {
namespace {

__global__ void AddOneKernel(float* p, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] += 1.0f;
  }
}

}  // namespace

Status AddOneOnDevice(float* p, size_t n, void* stream) {
  AddOneKernel<<<256, 256, 0, static_cast<cudaStream_t>(stream)>>>(p, n);
  return kernels::cuda::CudaError("launching the test's AddOneKernel", cudaGetLastError());
}

}  // namespace chorus::testing
