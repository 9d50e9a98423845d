// Device memory owned RAII-style, and the copies and waits tests, benchmarks and (later)
// the staging pipeline need, without CUDA headers in the caller.
#pragma once

#include <cstddef>
#include <utility>

#include "common/status.h"

namespace chorus::kernels::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // cudaMalloc of `bytes` (0 allowed: no allocation); the error names the size.
  static Result<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA stream (non-blocking: it does not wait for the legacy default stream).
class Stream {
 public:
  Stream() = default;
  static Result<Stream> Create();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return s_; }

 private:
  void* s_ = nullptr;
};

// Copies (host <-> device: complete on return, for every stream; device <-> device:
// on `stream`) and memset (complete on return).
Status CopyToDevice(void* dst, const void* src, size_t bytes);
Status CopyToHost(void* dst, const void* src, size_t bytes);
Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, void* stream);
// cudaMemcpyAsync in whichever direction the pointers say, enqueued on `stream`.
Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream);
Status Memset(void* dst, int value, size_t bytes);
// Waits for everything enqueued on `stream` (null: the default stream).
Status Synchronize(void* stream);
// cudaSetDevice for this thread ("no CUDA device" where there is none).
Status SetDevice(int device);

// Times `iters` runs of `fn` on the default stream with CUDA events; milliseconds per run.
template <typename Fn>
Result<double> TimeMs(int iters, Fn&& fn);

// Event timing, for TimeMs.
class EventTimer {
 public:
  EventTimer() = default;  // empty; Create() makes a usable one
  static Result<EventTimer> Create();
  ~EventTimer();
  EventTimer(EventTimer&& o) noexcept
      : start_(std::exchange(o.start_, nullptr)), stop_(std::exchange(o.stop_, nullptr)) {}
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  EventTimer& operator=(EventTimer&& o) noexcept {
    std::swap(start_, o.start_);
    std::swap(stop_, o.stop_);
    return *this;
  }
  Status Start();
  Result<double> StopMs();  // waits for the stop event

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

template <typename Fn>
Result<double> TimeMs(int iters, Fn&& fn) {
  Result<EventTimer> t = EventTimer::Create();
  if (!t.ok()) return t.status();
  CHORUS_RETURN_IF_ERROR(t.value().Start());
  for (int i = 0; i < iters; ++i) CHORUS_RETURN_IF_ERROR(fn());
  Result<double> ms = t.value().StopMs();
  if (!ms.ok()) return ms.status();
  return ms.value() / (iters > 0 ? iters : 1);
}

}  // namespace chorus::kernels::cuda
