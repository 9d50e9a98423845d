// A file mapped shared: created by its owner (size checked up front, so a small
// /dev/shm says so instead of a SIGBUS later), opened by peers, unlinked by the owner
// once every peer mapped it (a crash then leaves nothing behind). Also the futex
// wait/wake on a word of shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace chorus::transport::shm {

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& o) noexcept { *this = static_cast<Segment&&>(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // A new file `path` of `bytes`, zeroed, mapped. ENOSPC names the directory, its free
  // space and what was needed.
  static Result<Segment> Create(const std::string& path, size_t bytes);
  // A peer's file, mapped; `bytes` must match its size.
  static Result<Segment> Open(const std::string& path, size_t bytes);
  // Removes the file (the mappings stay). Idempotent.
  void Unlink();

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string path_;
  bool owner_ = false;  // unlinks on destruction if still linked
  bool linked_ = false;
};

// Sleeps while *word == expected, at most until `until` (shared, not process-private).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, Clock::time_point until);
void FutexWakeAll(std::atomic<uint32_t>* word);

// Free bytes of the file system holding `dir` (-1: unknown).
int64_t FreeBytes(const std::string& dir);

}  // namespace chorus::transport::shm
