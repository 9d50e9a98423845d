#include <cuda.h>  // types only: the driver's entry points are looked up at run time
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_words.h"
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

// cuStreamWriteValue32 (`write`) or cuStreamWaitValue32 of the word at `addr`, with `flags`.
Status Enqueue(bool write, void* stream, const void* addr, uint32_t value, unsigned flags) {
  const ValueFn fn = write ? Ops().write : Ops().wait;
  const char* name = write ? "cuStreamWriteValue32" : "cuStreamWaitValue32";
  if (fn == nullptr) return Unavailable(std::string("the driver has no ") + name);
  return DriverError(name, fn(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value, flags));
}

}  // namespace

Status EnqueueWriteWord(void* stream, void* word, uint32_t value) {
  return Enqueue(true, stream, word, value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

Status EnqueueWaitWordReached(void* stream, const void* word, uint32_t value) {
  return Enqueue(false, stream, word, value, CU_STREAM_WAIT_VALUE_GEQ);
}

bool SignalWords::DriverHasThem() { return Ops().write != nullptr && Ops().wait != nullptr; }

Result<SignalWords> SignalWords::Create(size_t count) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  if (!DriverHasThem()) {
    return Unavailable("the driver has no cuStreamWriteValue32/cuStreamWaitValue32 (stream memory operations)");
  }
  SignalWords s;
  void* p = nullptr;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaHostAlloc of " + std::to_string(count) + " signal words",
                cudaHostAlloc(&p, count * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable)));
  s.words_ = static_cast<volatile uint32_t*>(p);
  s.count_ = count;
  for (size_t i = 0; i < count; ++i) s.words_[i] = 0;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaHostGetDevicePointer of the signal words", cudaHostGetDevicePointer(&s.device_words_, p, 0)));
  // One write and one wait through a private stream: where the driver refuses them (a
  // GPU or configuration without stream memory operations), the caller knows now.
  Result<Stream> probe = Stream::Create();
  if (!probe.ok()) return probe.status();
  Status st = s.EnqueueWrite(probe->get(), 0, 1);
  if (st.ok()) st = s.EnqueueWait(probe->get(), 0, 1);
  if (st.ok()) st = Synchronize(probe->get());
  if (st.ok() && s.words_[0] != 1) st = InternalError("a word the stream wrote did not reach the host");
  if (!st.ok()) return Unavailable("stream memory operations do not work here: " + st.message());
  s.words_[0] = 0;
  return std::move(s);
}

SignalWords::~SignalWords() {
  if (words_ != nullptr) cudaFreeHost(const_cast<uint32_t*>(words_));
}

void* SignalWords::Word(size_t i) const { return static_cast<char*>(device_words_) + i * sizeof(uint32_t); }

Status SignalWords::EnqueueWrite(void* stream, size_t i, uint32_t value) const {
  return EnqueueWriteWord(stream, Word(i), value);
}

Status SignalWords::EnqueueWait(void* stream, size_t i, uint32_t value) const {
  return Enqueue(false, stream, Word(i), value, CU_STREAM_WAIT_VALUE_EQ);
}

Status SignalWords::EnqueueWaitReached(void* stream, size_t i, uint32_t value) const {
  return EnqueueWaitWordReached(stream, Word(i), value);
}

}  // namespace chorus::kernels::cuda
