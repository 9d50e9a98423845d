// kernels/cuda in a CPU-only build (no CUDA toolkit, or --config=cpu_only): the
// functions of its headers without nvcc or CUDA's runtime. Every call that would touch
// a GPU fails with "chorus was built without CUDA: <what was asked>", so callers take
// the paths they take on a machine without a GPU.
#include "kernels/cuda/cpu_only.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"

#ifndef CHORUS_NO_CUDA_REASON
#define CHORUS_NO_CUDA_REASON "built CPU-only"
#endif

namespace chorus::kernels::cuda {
namespace {

std::string Bytes(size_t n) { return std::to_string(n) + " bytes"; }

// The driver API's pointer query, where a driver is installed (a CUDA-built library
// beside chorus may pass in device memory). Values from cuda.h, stable in its ABI.
using CuInitFn = int (*)(unsigned int);
using CuPointerGetAttributeFn = int (*)(void*, int, unsigned long long);
constexpr int kAttributeMemoryType = 2;    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeIsManaged = 8;     // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

CuPointerGetAttributeFn PointerQuery() {
  static const CuPointerGetAttributeFn query = []() -> CuPointerGetAttributeFn {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    auto init = reinterpret_cast<CuInitFn>(dlsym(lib, "cuInit"));
    auto get = reinterpret_cast<CuPointerGetAttributeFn>(dlsym(lib, "cuPointerGetAttribute"));
    return init != nullptr && get != nullptr && init(0) == 0 ? get : nullptr;
  }();
  return query;
}

}  // namespace

Status BuiltWithoutCuda(const std::string& what) { return Unavailable("chorus was built without CUDA: " + what); }

// reduce_cuda.h

const Status& DeviceStatus() {
  static const Status status = BuiltWithoutCuda("no CUDA device can be used (" CHORUS_NO_CUDA_REASON ")");
  return status;
}
int DeviceCount() { return 0; }
bool BuiltWithCuda() { return false; }
Status LoadKernels() { return BuiltWithoutCuda("loading chorus's CUDA kernels"); }

Status Reduce(DataType dtype, ReduceOp op, void*, const void*, const void*, size_t count, void*) {
  return BuiltWithoutCuda(std::string("a ") + ReduceOpName(op) + " of " + std::to_string(count) + " " +
                          DataTypeName(dtype) + " on the device");
}
Status ReduceN(DataType dtype, ReduceOp op, void* dst, const void* const*, int, size_t count, void* stream) {
  return Reduce(dtype, op, dst, nullptr, nullptr, count, stream);
}
Status ReduceNToAll(DataType dtype, ReduceOp op, void* const*, int, const void* const*, int, size_t count,
                    void* stream) {
  return Reduce(dtype, op, nullptr, nullptr, nullptr, count, stream);
}
Status ScaleForAvg(DataType dtype, void*, size_t count, int, void*) {
  return BuiltWithoutCuda("an average of " + std::to_string(count) + " " + DataTypeName(dtype) + " on the device");
}

// device_memory.h

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  return BuiltWithoutCuda("a device buffer of " + Bytes(bytes));
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

Result<Stream> Stream::Create() { return BuiltWithoutCuda("a CUDA stream"); }
Stream::~Stream() = default;

Status CopyToDevice(void*, const void*, size_t bytes) {
  return BuiltWithoutCuda("a copy of " + Bytes(bytes) + " to the device");
}
Status CopyToHost(void*, const void*, size_t bytes) {
  return BuiltWithoutCuda("a copy of " + Bytes(bytes) + " from the device");
}
Status CopyDeviceToDevice(void*, const void*, size_t bytes, void*) {
  return BuiltWithoutCuda("a device-to-device copy of " + Bytes(bytes));
}
Status CopyAsync(void*, const void*, size_t bytes, void*) {
  return BuiltWithoutCuda("a copy of " + Bytes(bytes) + " on a CUDA stream");
}
Status Memset(void*, int, size_t bytes) { return BuiltWithoutCuda("a memset of " + Bytes(bytes) + " on the device"); }
Status Synchronize(void*) { return BuiltWithoutCuda("waiting for a CUDA stream"); }
Status SetDevice(int device) { return BuiltWithoutCuda("CUDA device " + std::to_string(device)); }

Result<EventTimer> EventTimer::Create() { return BuiltWithoutCuda("CUDA events to time with"); }
EventTimer::~EventTimer() = default;
Status EventTimer::Start() { return BuiltWithoutCuda("starting a CUDA event timer"); }
Result<double> EventTimer::StopMs() { return BuiltWithoutCuda("stopping a CUDA event timer"); }

// stream_ops.h

MemoryKind PointerKind(const void* ptr) {
  const CuPointerGetAttributeFn query = ptr != nullptr ? PointerQuery() : nullptr;
  if (query == nullptr) return MemoryKind::kHost;
  const auto address = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr));
  uint32_t managed = 0, type = 0;
  if (query(&managed, kAttributeIsManaged, address) == 0 && managed != 0) return MemoryKind::kManaged;
  if (query(&type, kAttributeMemoryType, address) == 0 && type == kMemoryTypeDevice) return MemoryKind::kDevice;
  return MemoryKind::kHost;
}

Result<int> DeviceOf(const void*) { return BuiltWithoutCuda("the device of a device buffer"); }
Result<int> CurrentDeviceIndex() { return BuiltWithoutCuda("the current CUDA device"); }
void* DriverFunction(const char*) { return nullptr; }
bool MpsEnabled() { return false; }
bool LazyLoading() { return false; }
bool IsCapturing(void*) { return false; }

Result<DeviceGuard> DeviceGuard::Set(int device) { return BuiltWithoutCuda("CUDA device " + std::to_string(device)); }
DeviceGuard::~DeviceGuard() = default;

Result<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  return BuiltWithoutCuda("a pinned host buffer of " + Bytes(bytes));
}
PinnedBuffer::~PinnedBuffer() = default;

Result<StreamEvent> StreamEvent::Record(void*) { return BuiltWithoutCuda("an event on a CUDA stream"); }
StreamEvent::~StreamEvent() = default;
Status StreamEvent::Wait(Deadline, const char* what) const {
  return BuiltWithoutCuda(std::string("waiting for ") + what);
}
bool StreamEvent::Reached() const { return true; }  // none is ever recorded
Status StreamEvent::EnqueueWaitOn(void*) const { return BuiltWithoutCuda("a CUDA stream waiting for an event"); }

Result<StreamSemaphore> StreamSemaphore::Create() { return BuiltWithoutCuda("a stream semaphore"); }
StreamSemaphore::~StreamSemaphore() = default;
Status StreamSemaphore::EnqueueWait(void*, uint64_t, int64_t) const {
  return BuiltWithoutCuda("holding a CUDA stream");
}
void StreamSemaphore::Release(uint64_t) const {}  // none is ever created
bool StreamSemaphore::Expired(uint64_t) const { return false; }

Result<CopyStream> CopyStream::Create() { return BuiltWithoutCuda("a CUDA stream for staging copies"); }
Status CopyStream::Copy(void*, const void*, size_t bytes, Deadline) const {
  return BuiltWithoutCuda("a staging copy of " + Bytes(bytes));
}
Result<StreamEvent> CopyStream::Start(void*, const void*, size_t bytes) const {
  return BuiltWithoutCuda("a staging copy of " + Bytes(bytes));
}

// signal_flags.h

Status EnqueueWriteFlag(void*, void*, uint32_t) { return BuiltWithoutCuda("a stream write of a signal flag"); }
Status EnqueueWaitFlagReached(void*, const void*, uint32_t) {
  return BuiltWithoutCuda("a stream wait on a signal flag");
}
Result<SignalFlags> SignalFlags::Create(size_t count) {
  return BuiltWithoutCuda(std::to_string(count) + " signal flags");
}
bool SignalFlags::DriverHasThem() { return false; }
SignalFlags::~SignalFlags() = default;
Status SignalFlags::EnqueueWrite(void*, size_t, uint32_t) const {
  return BuiltWithoutCuda("a stream write of a signal flag");
}
Status SignalFlags::EnqueueWait(void*, size_t, uint32_t) const {
  return BuiltWithoutCuda("a stream wait on a signal flag");
}
Status SignalFlags::EnqueueWaitReached(void*, size_t, uint32_t) const {
  return BuiltWithoutCuda("a stream wait on a signal flag");
}

}  // namespace chorus::kernels::cuda
