#include <cuda.h>  // types only: the driver's entry points are looked up at run time
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::kernels::cuda {
namespace {

using ValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct MemOps {
  ValueFn write = nullptr;
  ValueFn wait = nullptr;
};

const MemOps& Ops() {
  static const MemOps ops{reinterpret_cast<ValueFn>(DriverFunction("cuStreamWriteValue32")),
                          reinterpret_cast<ValueFn>(DriverFunction("cuStreamWaitValue32"))};
  return ops;
}

Status DriverError(const std::string& what, CUresult r) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return InternalError(what + " failed with CUresult " + std::to_string(static_cast<int>(r)));
}

// cuStreamWriteValue32 (`write`) or cuStreamWaitValue32 of the flag at `addr`, with the driver's `op_flags`.
Status Enqueue(bool write, void* stream, const void* addr, uint32_t value, unsigned op_flags) {
  const ValueFn fn = write ? Ops().write : Ops().wait;
  const char* name = write ? "cuStreamWriteValue32" : "cuStreamWaitValue32";
  if (fn == nullptr) return Unavailable(std::string("the driver has no ") + name);
  return DriverError(name, fn(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value, op_flags));
}

}  // namespace

Status EnqueueWriteFlag(void* stream, void* flag, uint32_t value) {
  return Enqueue(true, stream, flag, value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

Status EnqueueWaitFlagReached(void* stream, const void* flag, uint32_t value) {
  return Enqueue(false, stream, flag, value, CU_STREAM_WAIT_VALUE_GEQ);
}

bool SignalFlags::DriverHasThem() { return Ops().write != nullptr && Ops().wait != nullptr; }

Result<SignalFlags> SignalFlags::Create(size_t count) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  if (!DriverHasThem()) {
    return Unavailable("the driver has no cuStreamWriteValue32/cuStreamWaitValue32 (stream memory operations)");
  }
  SignalFlags s;
  void* p = nullptr;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaHostAlloc of " + std::to_string(count) + " signal flags",
                cudaHostAlloc(&p, count * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable)));
  s.flags_ = static_cast<volatile uint32_t*>(p);
  s.count_ = count;
  for (size_t i = 0; i < count; ++i) s.flags_[i] = 0;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaHostGetDevicePointer of the signal flags", cudaHostGetDevicePointer(&s.device_flags_, p, 0)));
  // One write and one wait through a private stream: where the driver refuses them (a
  // GPU or configuration without stream memory operations), the caller knows now.
  Result<Stream> probe = Stream::Create();
  if (!probe.ok()) return probe.status();
  Status st = s.EnqueueWrite(probe->get(), 0, 1);
  if (st.ok()) st = s.EnqueueWait(probe->get(), 0, 1);
  if (st.ok()) st = Synchronize(probe->get());
  if (st.ok() && s.flags_[0] != 1) st = InternalError("a flag the stream wrote did not reach the host");
  if (!st.ok()) return Unavailable("stream memory operations do not work here: " + st.message());
  s.flags_[0] = 0;
  return std::move(s);
}

SignalFlags::~SignalFlags() {
  if (flags_ != nullptr) cudaFreeHost(const_cast<uint32_t*>(flags_));
}

void* SignalFlags::Flag(size_t i) const { return static_cast<char*>(device_flags_) + i * sizeof(uint32_t); }

Status SignalFlags::EnqueueWrite(void* stream, size_t i, uint32_t value) const {
  return EnqueueWriteFlag(stream, Flag(i), value);
}

Status SignalFlags::EnqueueWait(void* stream, size_t i, uint32_t value) const {
  return Enqueue(false, stream, Flag(i), value, CU_STREAM_WAIT_VALUE_EQ);
}

Status SignalFlags::EnqueueWaitReached(void* stream, size_t i, uint32_t value) const {
  return EnqueueWaitFlagReached(stream, Flag(i), value);
}

}  // namespace chorus::kernels::cuda
