// What the device-buffer path of the API needs from CUDA, without CUDA headers in the
// caller: where a pointer lives, pinned host memory, events on a user's stream, a semaphore
// that holds a user's stream until the host opens it, and copies on a private stream
// that the host waits for with a deadline. Streams are cudaStream_t passed as void*
// (null: the legacy default stream).
//
// The stream semantics they build (chorus/device_calls.h), NCCL's: a call enqueues
//   user stream:   ... | event | wait(seq) | ...later work...
// and returns; a host thread waits for the event (the inputs are ready), stages the
// inputs to host memory, runs the host algorithm, copies the results back, then opens
// the semaphore: work the caller enqueues after the call sees the results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/deadline.h"
#include "common/status.h"
#include "kernels/cuda/device_memory.h"

namespace chorus::kernels::cuda {

enum class MemoryKind {
  kHost,     // pageable or pinned host memory (what CUDA does not know, too)
  kDevice,   // cudaMalloc'd
  kManaged,  // cudaMallocManaged: reachable from host and device
};
inline const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kDevice: return "device";
    case MemoryKind::kManaged: return "managed";
  }
  return "?";
}

// Where `ptr` lives. Without a usable CUDA device (DeviceStatus() not OK) every pointer
// is host memory, and this costs nothing after the first call; a CPU-only build asks
// the driver where one is installed, so device memory is never read as host memory.
MemoryKind PointerKind(const void* ptr);
// The device a device buffer is on; the calling thread's current device.
Result<int> DeviceOf(const void* ptr);
Result<int> CurrentDeviceIndex();
// A CUDA driver function (the CUDA 12.0 version of `name`) looked up through the
// runtime, so that nothing links libcuda and the library starts without a driver; null
// where the driver lacks it.
void* DriverFunction(const char* name);
// Whether the current device's contexts are shared through MPS (false where unknown).
bool MpsEnabled();
// Whether CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING=LAZY, the
// default since CUDA 12.2; false where the driver cannot say).
bool LazyLoading();
// Whether `stream` is being captured into a CUDA graph.
bool IsCapturing(void* stream);

// Makes a device current on this thread until destroyed, then restores the previous one.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  static Result<DeviceGuard> Set(int device);
  ~DeviceGuard();
  DeviceGuard(DeviceGuard&& o) noexcept : previous_(std::exchange(o.previous_, -1)) {}
  DeviceGuard& operator=(DeviceGuard&&) = delete;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// cudaMallocHost'd memory (page-locked: the copies run at full speed, asynchronously).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Result<PinnedBuffer> Allocate(size_t bytes);  // 0: no allocation
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An event recorded on a stream: "everything enqueued on it so far".
class StreamEvent {
 public:
  StreamEvent() = default;
  static Result<StreamEvent> Record(void* stream);
  ~StreamEvent();
  StreamEvent(StreamEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  StreamEvent& operator=(StreamEvent&& o) noexcept {
    std::swap(event_, o.event_);
    return *this;
  }
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  // Until the stream reached the event; a timeout error names `what` past the deadline.
  Status Wait(Deadline deadline, const char* what) const;
  // Whether the stream reached the event or failed (Wait then says how); never blocks.
  bool Reached() const;
  // Makes `stream`'s later work wait for the event (cudaStreamWaitEvent).
  Status EnqueueWaitOn(void* stream) const;

 private:
  void* event_ = nullptr;
};

// Holds streams behind a counter in pinned, device-mapped host memory: EnqueueWait(stream, seq)
// enqueues a one-thread kernel that returns once the counter reaches seq; Release(seq)
// sets the counter. Seqs are released in increasing order. The kernel gives up by itself
// after its timeout, so a stream is never held forever, whatever happens to the host;
// a semaphore that gave up says so (Expired), so the call it held fails instead of letting
// the stream run on over outputs that were never written. Destruction opens every
// semaphore and waits (bounded) for the last one held before freeing the slots they read.
class StreamSemaphore {
 public:
  StreamSemaphore() = default;
  static Result<StreamSemaphore> Create();
  ~StreamSemaphore();
  StreamSemaphore(StreamSemaphore&& o) noexcept
      : slots_(std::exchange(o.slots_, nullptr)),
        device_slots_(std::exchange(o.device_slots_, nullptr)),
        last_(std::exchange(o.last_, nullptr)) {}
  StreamSemaphore& operator=(StreamSemaphore&& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(device_slots_, o.device_slots_);
    std::swap(last_, o.last_);
    return *this;
  }
  StreamSemaphore(const StreamSemaphore&) = delete;
  StreamSemaphore& operator=(const StreamSemaphore&) = delete;

  // Not thread-safe: one caller at a time (DeviceCalls holds its lock).
  Status EnqueueWait(void* stream, uint64_t seq, int64_t timeout_ms) const;
  void Release(uint64_t seq) const;
  // Whether the semaphore of `seq` gave up before it was released (its own slot of 64: exact
  // while fewer than 64 later semaphores are held).
  bool Expired(uint64_t seq) const;

 private:
  volatile unsigned long long* slots_ = nullptr;  // [0] the counter, [1 + seq % 64] seqs that gave up
  void* device_slots_ = nullptr;                  // the same slots, as the semaphore wait kernel sees them
  void* last_ = nullptr;                          // event recorded after the last semaphore held
};

// A private non-blocking stream for staging copies; each copy waits for its end.
class CopyStream {
 public:
  static Result<CopyStream> Create();
  // cudaMemcpyAsync (any direction) and wait for it, at most until the deadline.
  Status Copy(void* dst, const void* src, size_t bytes, Deadline deadline) const;
  // cudaMemcpyAsync (any direction) without waiting: the event says when it is done
  // (copies on one CopyStream complete in order).
  Result<StreamEvent> Start(void* dst, const void* src, size_t bytes) const;
  void* get() const { return stream_.get(); }  // the cudaStream_t

 private:
  Stream stream_;
};

}  // namespace chorus::kernels::cuda
