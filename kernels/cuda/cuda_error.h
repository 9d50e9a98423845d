// CUDA runtime errors as chorus Statuses (for .cu files: it includes cuda_runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace chorus::kernels::cuda {

// OK for cudaSuccess; else the call named by `what`, the error's name and text
// (kUnavailable when memory ran out). Clears the runtime's last error.
inline Status CudaError(const std::string& what, cudaError_t e) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status(e == cudaErrorMemoryAllocation ? StatusCode::kUnavailable : StatusCode::kInternal,
                what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace chorus::kernels::cuda
