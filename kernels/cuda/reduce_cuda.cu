// CUDA kernels behind reduce_cuda.h: grid-stride loops, 16-byte loads and stores when
// every pointer allows them, the CPU's element-wise functors (elementwise.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/reduce_cuda.h"
#include "kernels/dispatch.h"

namespace chorus::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One 16-byte vector of storage elements.
template <typename S>
struct alignas(16) Vec {
  static constexpr int kLanes = 16 / sizeof(S);
  S v[kLanes];
};

template <typename S, typename Op>
__device__ inline S Apply(S a, S b) {
  using T = StorageTraits<S>;
  return T::Store(Op()(T::Load(a), T::Load(b)));
}

template <typename S, typename Op>
__global__ void Reduce2Kernel(S* __restrict__ dst, const S* a, const S* b, size_t count, bool vector) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vector) {
    using V = Vec<S>;
    const size_t nvec = count / V::kLanes;
    const V* va = reinterpret_cast<const V*>(a);
    const V* vb = reinterpret_cast<const V*>(b);
    V* vd = reinterpret_cast<V*>(dst);
    for (size_t i = first; i < nvec; i += stride) {
      const V x = va[i], y = vb[i];
      V r;
#pragma unroll
      for (int l = 0; l < V::kLanes; ++l) r.v[l] = Apply<S, Op>(x.v[l], y.v[l]);
      vd[i] = r;
    }
    done = nvec * V::kLanes;
  }
  for (size_t i = done + first; i < count; i += stride) dst[i] = Apply<S, Op>(a[i], b[i]);
}

struct Inputs {
  const void* p[kMaxInputs];
};
struct Outputs {
  void* p[kMaxInputs];
};

// The stored result, divided by avg_n where > 0 (ScaleForAvg's arithmetic, so the bits
// equal a reduction followed by ScaleForAvg).
template <typename S>
__device__ inline S Finish(S stored, int avg_n) {
  return avg_n > 0 ? ScaleForAvgOne(stored, avg_n) : stored;
}

// Left to right over the n inputs, accumulating in T::Load's type (float for fp16/bf16),
// 16 bytes per input and lane group where `vector` (every pointer 16-byte aligned); the
// result goes to each of the m outputs. The pointer tables stay in the parameter bank
// (__grid_constant__): indexed at run time, a by-value table is copied to every
// thread's stack first.
template <typename S, typename Op>
__global__ void ReduceNKernel(const __grid_constant__ Outputs out, int m, const __grid_constant__ Inputs in, int n,
                              size_t count, bool vector, int avg_n) {
  using T = StorageTraits<S>;
  using A = decltype(T::Load(S()));
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vector) {
    using V = Vec<S>;
    const size_t nvec = count / V::kLanes;
    for (size_t i = first; i < nvec; i += stride) {
      const V x = static_cast<const V*>(in.p[0])[i];
      A acc[V::kLanes];
#pragma unroll
      for (int l = 0; l < V::kLanes; ++l) acc[l] = T::Load(x.v[l]);
      for (int k = 1; k < n; ++k) {
        const V y = static_cast<const V*>(in.p[k])[i];
#pragma unroll
        for (int l = 0; l < V::kLanes; ++l) acc[l] = Op()(acc[l], T::Load(y.v[l]));
      }
      V r;
#pragma unroll
      for (int l = 0; l < V::kLanes; ++l) r.v[l] = Finish(T::Store(acc[l]), avg_n);
      for (int j = 0; j < m; ++j) static_cast<V*>(out.p[j])[i] = r;
    }
    done = nvec * V::kLanes;
  }
  for (size_t i = done + first; i < count; i += stride) {
    A acc = T::Load(static_cast<const S*>(in.p[0])[i]);
    for (int k = 1; k < n; ++k) acc = Op()(acc, T::Load(static_cast<const S*>(in.p[k])[i]));
    const S r = Finish(T::Store(acc), avg_n);
    for (int j = 0; j < m; ++j) static_cast<S*>(out.p[j])[i] = r;
  }
}

template <typename S>
__global__ void ScaleKernel(S* buf, size_t count, int n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    buf[i] = ScaleForAvgOne(buf[i], n);
  }
}

unsigned Blocks(size_t work) {
  // Enough blocks to fill any current GPU; the grid-stride loops cover the rest.
  const size_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

struct Probe {
  Status status;
  int count = 0;
};

const Probe& ProbeOnce() {
  static const Probe probe = [] {
    Probe p;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      p.status = Unavailable(std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e) + ")");
      cudaGetLastError();  // clear the sticky-free error state
    } else if (n == 0) {
      p.status = Unavailable("no CUDA device (cudaGetDeviceCount: 0 devices)");
    }
    p.count = p.status.ok() ? n : 0;
    return p;
  }();
  return probe;
}

Status Launched(const std::string& what, DataType dtype, size_t count) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return InternalError("CUDA " + what + " of " + std::to_string(count) + " " + DataTypeName(dtype) +
                       " elements failed to launch: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// The device and the enums.
Status CheckCall(const char* fn, DataType dtype, ReduceOp op) {
  CHORUS_RETURN_IF_ERROR(ProbeOnce().status);
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kNumDataTypes) {
    return InvalidArgument(std::string(fn) + ": invalid DataType value " + std::to_string(static_cast<int>(dtype)));
  }
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps) {
    return InvalidArgument(std::string(fn) + ": invalid ReduceOp value " + std::to_string(static_cast<int>(op)));
  }
  return Status::Ok();
}

// One buffer: non-null and reachable from the GPU (plain host memory passed by mistake
// is named, not dereferenced by a kernel).
Status CheckBuffer(const char* fn, const std::string& name, const void* p, size_t count) {
  if (p == nullptr)
    return InvalidArgument(std::string(fn) + ": " + name + " is null with count " + std::to_string(count));
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument(std::string(fn) + ": " + name + " is not memory CUDA knows");
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    return InvalidArgument(std::string(fn) + ": " + name +
                           " is ordinary host memory; pass device (or registered/managed) memory");
  }
  return Status::Ok();
}

}  // namespace

Status LoadKernels() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  cudaError_t first = cudaSuccess;
  auto load = [&](const void* kernel) {
    cudaFuncAttributes a{};
    const cudaError_t e = cudaFuncGetAttributes(&a, kernel);  // loads the kernel where it is not yet
    if (e != cudaSuccess && first == cudaSuccess) first = e;
  };
  for (int d = 0; d < kNumDataTypes; ++d) {
    VisitDataType(static_cast<DataType>(d), [&](auto tag) {
      using S = decltype(tag);
      load(reinterpret_cast<const void*>(&ScaleKernel<S>));
      for (int o = 0; o < kNumReduceOps; ++o) {
        VisitReduceOp(static_cast<ReduceOp>(o), [&](auto fn) {
          using Op = decltype(fn);
          load(reinterpret_cast<const void*>(&Reduce2Kernel<S, Op>));
          load(reinterpret_cast<const void*>(&ReduceNKernel<S, Op>));
        });
      }
    });
  }
  if (first == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return InternalError(std::string("loading chorus's CUDA kernels: ") + cudaGetErrorName(first) + ": " +
                       cudaGetErrorString(first));
}

const Status& DeviceStatus() { return ProbeOnce().status; }
int DeviceCount() { return ProbeOnce().count; }
bool BuiltWithCuda() { return true; }

Status Reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream) {
  CHORUS_RETURN_IF_ERROR(CheckCall("cuda::Reduce", dtype, op));
  if (count == 0) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(CheckBuffer("cuda::Reduce", "dst", dst, count));
  CHORUS_RETURN_IF_ERROR(CheckBuffer("cuda::Reduce", "a", a, count));
  CHORUS_RETURN_IF_ERROR(CheckBuffer("cuda::Reduce", "b", b, count));
  const bool vector =
      ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15u) == 0;
  auto s = static_cast<cudaStream_t>(stream);
  VisitDataType(dtype, [&](auto tag) {
    using S = decltype(tag);
    VisitReduceOp(op, [&](auto fn) {
      using Op = decltype(fn);
      const size_t work = vector ? count / Vec<S>::kLanes + 1 : count;
      Reduce2Kernel<S, Op><<<Blocks(work), kThreads, 0, s>>>(static_cast<S*>(dst), static_cast<const S*>(a),
                                                             static_cast<const S*>(b), count, vector);
    });
  });
  return Launched("reduce", dtype, count);
}

namespace {

// ReduceN and ReduceNToAll: m outputs, AVG divided in the kernel where `scale_avg`.
Status ReduceMany(const char* fn, DataType dtype, ReduceOp op, void* const* dsts, int m, const void* const* inputs,
                  int n, size_t count, bool scale_avg, void* stream) {
  if (n < 1 || n > kMaxInputs) {
    return InvalidArgument(std::string(fn) + ": " + std::to_string(n) + " inputs (1.." + std::to_string(kMaxInputs) +
                           ")");
  }
  if (m < 1 || m > kMaxInputs) {
    return InvalidArgument(std::string(fn) + ": " + std::to_string(m) + " outputs (1.." + std::to_string(kMaxInputs) +
                           ")");
  }
  CHORUS_RETURN_IF_ERROR(CheckCall(fn, dtype, op));
  if (count == 0) return Status::Ok();
  Outputs out{};
  Inputs in{};
  uintptr_t bits = 0;
  for (int j = 0; j < m; ++j) {
    CHORUS_RETURN_IF_ERROR(CheckBuffer(fn, m == 1 ? "dst" : "dsts[" + std::to_string(j) + "]", dsts[j], count));
    out.p[j] = dsts[j];
    bits |= reinterpret_cast<uintptr_t>(dsts[j]);
  }
  for (int k = 0; k < n; ++k) {
    CHORUS_RETURN_IF_ERROR(CheckBuffer(fn, "inputs[" + std::to_string(k) + "]", inputs[k], count));
    in.p[k] = inputs[k];
    bits |= reinterpret_cast<uintptr_t>(inputs[k]);
  }
  const bool vector = (bits & 15u) == 0;
  const int avg_n = scale_avg && op == ReduceOp::kAvg ? n : 0;
  auto s = static_cast<cudaStream_t>(stream);
  VisitDataType(dtype, [&](auto tag) {
    using S = decltype(tag);
    VisitReduceOp(op, [&](auto fn_op) {
      using Op = decltype(fn_op);
      const size_t work = vector ? count / Vec<S>::kLanes + 1 : count;
      ReduceNKernel<S, Op><<<Blocks(work), kThreads, 0, s>>>(out, m, in, n, count, vector, avg_n);
    });
  });
  return Launched("reduce of " + std::to_string(n) + " inputs", dtype, count);
}

}  // namespace

Status ReduceN(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count, void* stream) {
  return ReduceMany("cuda::ReduceN", dtype, op, &dst, 1, inputs, n, count, /*scale_avg=*/false, stream);
}

Status ReduceNToAll(DataType dtype, ReduceOp op, void* const* dsts, int m, const void* const* inputs, int n,
                    size_t count, void* stream) {
  return ReduceMany("cuda::ReduceNToAll", dtype, op, dsts, m, inputs, n, count, /*scale_avg=*/true, stream);
}

Status ScaleForAvg(DataType dtype, void* buf, size_t count, int n, void* stream) {
  CHORUS_RETURN_IF_ERROR(CheckCall("cuda::ScaleForAvg", dtype, ReduceOp::kSum));
  if (n < 1) return InvalidArgument("cuda::ScaleForAvg: n must be >= 1, got " + std::to_string(n));
  if (count == 0) return Status::Ok();
  CHORUS_RETURN_IF_ERROR(CheckBuffer("cuda::ScaleForAvg", "buf", buf, count));
  auto s = static_cast<cudaStream_t>(stream);
  VisitDataType(dtype, [&](auto tag) {
    using S = decltype(tag);
    ScaleKernel<S><<<Blocks(count), kThreads, 0, s>>>(static_cast<S*>(buf), count, n);
  });
  return Launched("average scaling", dtype, count);
}

}  // namespace chorus::kernels::cuda
