// 32-bit words in pinned, device-mapped host memory that CUDA streams write and wait on
// without a kernel (cuStreamWriteValue32, cuStreamWaitValue32: the GPU's front end waits,
// no SM spins), and that host threads read and write as plain atomics. A thread that
// only polls and stores such words makes no CUDA call, so it cannot be stopped by what
// holds CUDA's context lock while it waits for the device (a kernel loaded lazily on its
// first launch, a cudaFree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/status.h"

namespace chorus::kernels::cuda {

// Stream memory operations on any word a stream can address (device memory, a peer's
// memory mapped through CUDA IPC, mapped host memory), enqueued on `stream`: write
// `value` once the stream's earlier work is done (its writes visible first), or hold the
// stream's later work until the word has reached `value` (cyclic: (int32_t)(word -
// value) >= 0, for words that only grow). kUnavailable where the driver lacks them.
Status EnqueueWriteWord(void* stream, void* word, uint32_t value);
Status EnqueueWaitWordReached(void* stream, const void* word, uint32_t value);

class SignalWords {
 public:
  SignalWords() = default;
  // `count` words, all 0, on the current device; kUnavailable (saying why) where the
  // driver has no stream memory operations or the first write through one fails.
  static Result<SignalWords> Create(size_t count);
  // Whether the driver has the stream memory operations (cuStreamWriteValue32,
  // cuStreamWaitValue32) that Create needs; no CUDA call, false without a driver.
  static bool DriverHasThem();
  ~SignalWords();
  SignalWords(SignalWords&& o) noexcept
      : words_(std::exchange(o.words_, nullptr)),
        device_words_(std::exchange(o.device_words_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  SignalWords& operator=(SignalWords&& o) noexcept {
    std::swap(words_, o.words_);
    std::swap(device_words_, o.device_words_);
    std::swap(count_, o.count_);
    return *this;
  }
  SignalWords(const SignalWords&) = delete;
  SignalWords& operator=(const SignalWords&) = delete;

  bool valid() const { return words_ != nullptr; }
  size_t size() const { return count_; }

  // Host side (no CUDA call): the words themselves, which chorus/signalled_staging.h's
  // SignalView reads and writes as atomics.
  volatile uint32_t* host() const { return words_; }

  // Stream side, enqueued: the stream writes `value` into word i once its earlier work
  // is done (with a memory barrier: that work's writes are visible first), or waits
  // before its later work until word i equals `value`, or has reached it (cyclic:
  // (int32_t)(word - value) >= 0, for words that only grow).
  Status EnqueueWrite(void* stream, size_t i, uint32_t value) const;
  Status EnqueueWait(void* stream, size_t i, uint32_t value) const;
  Status EnqueueWaitReached(void* stream, size_t i, uint32_t value) const;

 private:
  void* Word(size_t i) const;  // word i as the streams address it

  volatile uint32_t* words_ = nullptr;
  void* device_words_ = nullptr;  // the same words, as the streams address them
  size_t count_ = 0;
};

}  // namespace chorus::kernels::cuda
