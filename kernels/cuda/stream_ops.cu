#include "kernels/cuda/stream_ops.h"

#include <cuda_runtime.h>

#include <string>
#include <thread>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/reduce_cuda.h"

namespace chorus::kernels::cuda {
namespace {

// Waits for an event or a stream by polling (cudaEventSynchronize has no timeout),
// sleeping a little longer each time up to 200 us.
template <typename Query>
Status PollUntil(Query query, Deadline deadline, const std::string& what) {
  int sleep_us = 1;
  for (;;) {
    cudaError_t e = query();
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) return CudaError(what, e);
    if (deadline.expired()) return TimeoutError(what + ": not finished by the deadline");
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    if (sleep_us < 200) sleep_us *= 2;
  }
}

// Returns once *counter >= seq, or after timeout_ns of the GPU's global timer.
__global__ void GateKernel(const volatile unsigned long long* counter, unsigned long long seq,
                           unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*counter < seq) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) return;
    __nanosleep(1000);
  }
}

}  // namespace

const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kDevice: return "device";
    case MemoryKind::kManaged: return "managed";
  }
  return "?";
}

MemoryKind PointerKind(const void* ptr) {
  if (ptr == nullptr || !DeviceStatus().ok()) return MemoryKind::kHost;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return MemoryKind::kHost;
  }
  switch (a.type) {
    case cudaMemoryTypeDevice: return MemoryKind::kDevice;
    case cudaMemoryTypeManaged: return MemoryKind::kManaged;
    default: return MemoryKind::kHost;
  }
}

Result<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  PinnedBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaMallocHost of " + std::to_string(bytes) + " bytes (staging)", cudaMallocHost(&b.ptr_, bytes)));
  b.bytes_ = bytes;
  return std::move(b);
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

Result<StreamMark> StreamMark::Record(void* stream) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  StreamMark m;
  cudaEvent_t e = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
  m.event_ = e;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventRecord on the caller's stream",
                                   cudaEventRecord(e, static_cast<cudaStream_t>(stream))));
  return std::move(m);
}

StreamMark::~StreamMark() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Status StreamMark::Wait(Deadline deadline, const char* what) const {
  auto e = static_cast<cudaEvent_t>(event_);
  return PollUntil([e] { return cudaEventQuery(e); }, deadline, what);
}

bool StreamMark::Reached() const {
  return event_ == nullptr || cudaEventQuery(static_cast<cudaEvent_t>(event_)) != cudaErrorNotReady;
}

Result<StreamGate> StreamGate::Create() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  StreamGate g;
  void* p = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaHostAlloc of the stream gate counter",
                                   cudaHostAlloc(&p, sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable)));
  g.counter_ = static_cast<volatile unsigned long long*>(p);
  *g.counter_ = 0;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaHostGetDevicePointer of the stream gate counter",
                                   cudaHostGetDevicePointer(&g.device_counter_, p, 0)));
  return std::move(g);
}

StreamGate::~StreamGate() {
  if (counter_) cudaFreeHost(const_cast<unsigned long long*>(counter_));
}

Status StreamGate::Hold(void* stream, uint64_t seq, int64_t timeout_ms) const {
  const unsigned long long timeout_ns = static_cast<unsigned long long>(timeout_ms) * 1000000ull;
  GateKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const volatile unsigned long long*>(device_counter_), seq, timeout_ns);
  return CudaError("launching the stream gate kernel", cudaGetLastError());
}

void StreamGate::Open(uint64_t seq) const {
  // Everything this thread wrote before (the copies' waits returned) happens before.
  __atomic_store_n(const_cast<unsigned long long*>(counter_), static_cast<unsigned long long>(seq), __ATOMIC_RELEASE);
}

Result<CopyStream> CopyStream::Create() {
  Result<Stream> s = Stream::Create();
  if (!s.ok()) return s.status();
  CopyStream c;
  c.stream_ = std::move(s.value());
  return std::move(c);
}

Status CopyStream::Copy(void* dst, const void* src, size_t bytes, Deadline deadline) const {
  if (bytes == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream_.get());
  const std::string what = "staging copy of " + std::to_string(bytes) + " bytes";
  CHORUS_RETURN_IF_ERROR(CudaError("cudaMemcpyAsync (" + what + ")", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
  return PollUntil([s] { return cudaStreamQuery(s); }, deadline, what);
}

Result<StreamMark> CopyStream::Start(void* dst, const void* src, size_t bytes) const {
  auto s = static_cast<cudaStream_t>(stream_.get());
  if (bytes > 0) {
    CHORUS_RETURN_IF_ERROR(CudaError("cudaMemcpyAsync (staging copy of " + std::to_string(bytes) + " bytes)",
                                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
  }
  return StreamMark::Record(s);
}

}  // namespace chorus::kernels::cuda
