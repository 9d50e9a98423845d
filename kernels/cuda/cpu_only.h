// The error of every device call in a CPU-only build (cpu_only.cc and its kind in
// transport/cuda_ipc and the tests): docs/design/cuda_optional.md.
#pragma once

#include <string>

#include "common/status.h"

namespace chorus::kernels::cuda {

// kUnavailable "chorus was built without CUDA: <what>".
Status BuiltWithoutCuda(const std::string& what);

}  // namespace chorus::kernels::cuda
