// 32-bit flags in pinned, device-mapped host memory that CUDA streams write and wait on
// without a kernel (cuStreamWriteValue32, cuStreamWaitValue32: the GPU's front end waits,
// no SM spins), and that host threads read and write as plain atomics. A thread that
// only polls and stores such flags makes no CUDA call, so it cannot be stopped by what
// holds CUDA's context lock while it waits for the device (a kernel loaded lazily on its
// first launch, a cudaFree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/status.h"

namespace chorus::kernels::cuda {

// Stream memory operations on any flag a stream can address (device memory, a peer's
// memory mapped through CUDA IPC, mapped host memory), enqueued on `stream`: write
// `value` once the stream's earlier work is done (its writes visible first), or hold the
// stream's later work until the flag has reached `value` (cyclic: (int32_t)(flag -
// value) >= 0, for flags that only grow). kUnavailable where the driver lacks them.
Status EnqueueWriteFlag(void* stream, void* flag, uint32_t value);
Status EnqueueWaitFlagReached(void* stream, const void* flag, uint32_t value);

class SignalFlags {
 public:
  SignalFlags() = default;
  // `count` flags, all 0, on the current device; kUnavailable (saying why) where the
  // driver has no stream memory operations or the first write through one fails.
  static Result<SignalFlags> Create(size_t count);
  // Whether the driver has the stream memory operations (cuStreamWriteValue32,
  // cuStreamWaitValue32) that Create needs; no CUDA call, false without a driver.
  static bool DriverHasThem();
  ~SignalFlags();
  SignalFlags(SignalFlags&& o) noexcept
      : flags_(std::exchange(o.flags_, nullptr)),
        device_flags_(std::exchange(o.device_flags_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  SignalFlags& operator=(SignalFlags&& o) noexcept {
    std::swap(flags_, o.flags_);
    std::swap(device_flags_, o.device_flags_);
    std::swap(count_, o.count_);
    return *this;
  }
  SignalFlags(const SignalFlags&) = delete;
  SignalFlags& operator=(const SignalFlags&) = delete;

  bool valid() const { return flags_ != nullptr; }
  size_t size() const { return count_; }

  // Host side (no CUDA call): the flags themselves, which chorus/signalled_staging.h's
  // SignalView reads and writes as atomics.
  volatile uint32_t* host() const { return flags_; }

  // Stream side, enqueued: the stream writes `value` into flag i once its earlier work
  // is done (with a memory barrier: that work's writes are visible first), or waits
  // before its later work until flag i equals `value`, or has reached it (cyclic:
  // (int32_t)(flag - value) >= 0, for flags that only grow).
  Status EnqueueWrite(void* stream, size_t i, uint32_t value) const;
  Status EnqueueWait(void* stream, size_t i, uint32_t value) const;
  Status EnqueueWaitReached(void* stream, size_t i, uint32_t value) const;

 private:
  void* Flag(size_t i) const;  // flag i as the streams address it

  volatile uint32_t* flags_ = nullptr;
  void* device_flags_ = nullptr;  // the same flags, as the streams address them
  size_t count_ = 0;
};

}  // namespace chorus::kernels::cuda
