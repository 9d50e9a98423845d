#include <cuda.h>  // types only: the driver's entry point is looked up at run time
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "common/poll.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::kernels::cuda {
namespace {

// Waits for an event or a stream (cudaEventSynchronize has no timeout) by polling its
// query (common/poll.h); an error the query reports ends the wait.
template <typename Query>
Status PollQuery(Query query, Deadline deadline, const std::string& what) {
  cudaError_t e = cudaErrorNotReady;
  CHORUS_RETURN_IF_ERROR(chorus::PollUntil(
      [&] {
        e = query();
        return e != cudaErrorNotReady;
      },
      deadline, what));
  return CudaError(what, e);
}

// Slots of a stream semaphore: the counter the host sets, then a ring of the seqs whose
// semaphore gave up, each at its own slot (seq % kExpirySlots), so one call's verdict never
// depends on another semaphore's timing.
constexpr int kExpirySlots = 64;

// Returns once slots[0] >= seq, or after timeout_ns of the GPU's global timer; then
// writes seq into its slot, so that the host learns the stream went on without it.
__global__ void SemaphoreWaitKernel(volatile unsigned long long* slots, unsigned long long seq,
                                    unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (slots[0] < seq) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      slots[1 + seq % kExpirySlots] = seq;
      __threadfence_system();
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

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

Result<StreamEvent> StreamEvent::Record(void* stream) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  StreamEvent m;
  cudaEvent_t e = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
  m.event_ = e;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaEventRecord on the caller's stream", cudaEventRecord(e, static_cast<cudaStream_t>(stream))));
  return std::move(m);
}

StreamEvent::~StreamEvent() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Status StreamEvent::Wait(Deadline deadline, const char* what) const {
  auto e = static_cast<cudaEvent_t>(event_);
  return PollQuery([e] { return cudaEventQuery(e); }, deadline, what);
}

Result<int> DeviceOf(const void* ptr) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  cudaPointerAttributes a{};
  CHORUS_RETURN_IF_ERROR(CudaError("cudaPointerGetAttributes", cudaPointerGetAttributes(&a, ptr)));
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", ptr);
    return InvalidArgument(std::string(addr) + " is not device memory");
  }
  return a.device;
}

Result<int> CurrentDeviceIndex() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  int d = 0;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaGetDevice", cudaGetDevice(&d)));
  return d;
}

bool MpsEnabled() {
  Result<int> d = CurrentDeviceIndex();
  int mps = 0;
  if (!d.ok() || cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, d.value()) != cudaSuccess) {
    cudaGetLastError();  // a driver without the attribute: unknown
    return false;
  }
  return mps != 0;
}

void* DriverFunction(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

bool LazyLoading() {
  if (!DeviceStatus().ok()) return false;
  using LoadingModeFn = CUresult (*)(CUmoduleLoadingMode*);
  auto fn = reinterpret_cast<LoadingModeFn>(DriverFunction("cuModuleGetLoadingMode"));
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  return fn != nullptr && fn(&mode) == CUDA_SUCCESS && mode == CU_MODULE_LAZY_LOADING;
}

bool IsCapturing(void* stream) {
  if (!DeviceStatus().ok()) return false;
  cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &s) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return s != cudaStreamCaptureStatusNone;
}

Result<DeviceGuard> DeviceGuard::Set(int device) {
  Result<int> cur = CurrentDeviceIndex();
  if (!cur.ok()) return cur.status();
  DeviceGuard g;
  if (cur.value() == device) return std::move(g);
  CHORUS_RETURN_IF_ERROR(CudaError("cudaSetDevice(" + std::to_string(device) + ")", cudaSetDevice(device)));
  g.previous_ = cur.value();
  return std::move(g);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Status StreamEvent::EnqueueWaitOn(void* stream) const {
  return CudaError("cudaStreamWaitEvent (a stream waits for another's event)",
                   cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0));
}

bool StreamEvent::Reached() const {
  return event_ == nullptr || cudaEventQuery(static_cast<cudaEvent_t>(event_)) != cudaErrorNotReady;
}

Result<StreamSemaphore> StreamSemaphore::Create() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  StreamSemaphore g;
  void* p = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError(
      "cudaHostAlloc of the stream semaphore's slots",
      cudaHostAlloc(&p, (1 + kExpirySlots) * sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable)));
  g.slots_ = static_cast<volatile unsigned long long*>(p);
  for (int i = 0; i <= kExpirySlots; ++i) g.slots_[i] = 0;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaHostGetDevicePointer of the stream semaphore's slots",
                                   cudaHostGetDevicePointer(&g.device_slots_, p, 0)));
  cudaEvent_t e = nullptr;
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaEventCreateWithFlags (stream semaphore)", cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
  g.last_ = e;
  // Loaded now, not at its first launch (see LoadKernels in reduce_cuda.h).
  cudaFuncAttributes attr{};
  CHORUS_RETURN_IF_ERROR(CudaError("loading the stream semaphore wait kernel",
                                   cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&SemaphoreWaitKernel))));
  return std::move(g);
}

StreamSemaphore::~StreamSemaphore() {
  if (slots_ == nullptr) return;
  __atomic_store_n(const_cast<unsigned long long*>(&slots_[0]), ~0ull,
                   __ATOMIC_RELEASE);  // every semaphore is released
  if (last_ != nullptr) {
    // The last semaphore held (and, on its stream, everything before it) is done before the
    // slots go; bounded: a stream stuck on other work keeps them (a leak of 520 bytes).
    const bool done = PollQuery([e = static_cast<cudaEvent_t>(last_)] { return cudaEventQuery(e); },
                                Deadline::AfterMs(10000), "the last stream semaphore")
                          .ok();
    cudaEventDestroy(static_cast<cudaEvent_t>(last_));
    if (!done) return;
  }
  cudaFreeHost(const_cast<unsigned long long*>(slots_));
}

Status StreamSemaphore::EnqueueWait(void* stream, uint64_t seq, int64_t timeout_ms) const {
  unsigned long long timeout_ns = static_cast<unsigned long long>(timeout_ms) * 1000000ull;
  unsigned long long s = seq;
  void* slots = device_slots_;
  void* args[] = {&slots, &s, &timeout_ns};
  auto st = static_cast<cudaStream_t>(stream);
  // cudaLaunchKernel reports this launch's own error (not one left over on the thread).
  CHORUS_RETURN_IF_ERROR(
      CudaError("launching the stream semaphore wait kernel",
                cudaLaunchKernel(reinterpret_cast<const void*>(&SemaphoreWaitKernel), dim3(1), dim3(1), args, 0, st)));
  // Only a failed launch is an error (then nothing waits for seq). The event only lets
  // destruction wait for the last semaphore; without it, destruction waits less.
  if (cudaEventRecord(static_cast<cudaEvent_t>(last_), st) != cudaSuccess) cudaGetLastError();
  return Status::Ok();
}

void StreamSemaphore::Release(uint64_t seq) const {
  // Everything this thread wrote before (the copies' waits returned) happens before.
  __atomic_store_n(const_cast<unsigned long long*>(&slots_[0]), static_cast<unsigned long long>(seq), __ATOMIC_RELEASE);
}

bool StreamSemaphore::Expired(uint64_t seq) const {
  return __atomic_load_n(const_cast<unsigned long long*>(&slots_[1 + seq % kExpirySlots]), __ATOMIC_ACQUIRE) == seq;
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
  CHORUS_RETURN_IF_ERROR(
      CudaError("cudaMemcpyAsync (" + what + ")", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
  return PollQuery([s] { return cudaStreamQuery(s); }, deadline, what);
}

Result<StreamEvent> CopyStream::Start(void* dst, const void* src, size_t bytes) const {
  auto s = static_cast<cudaStream_t>(stream_.get());
  if (bytes > 0) {
    CHORUS_RETURN_IF_ERROR(CudaError("cudaMemcpyAsync (staging copy of " + std::to_string(bytes) + " bytes)",
                                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
  }
  return StreamEvent::Record(s);
}

}  // namespace chorus::kernels::cuda
