// Scratch memory that is used again instead of freed. A fresh large allocation is
// fresh pages: the kernel zeroes each one on its first touch (a page fault per 4 KiB),
// and glibc returns large blocks to the kernel when they are freed, so a collective
// that takes megabytes of scratch per call pays for them again on every call. A
// BufferCache keeps the buffers its callers are done with, up to a byte cap, and hands
// them out again for requests of about their size.
//
// Thread-safe. The cache must outlive every Buffer taken from it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace chorus {

class BufferCache {
 public:
  // Memory from Get(): goes back to its cache (or is freed) when destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { Reset(); }

    char* data() const { return mem_.get(); }
    size_t size() const { return size_; }
    void Reset();

   private:
    friend class BufferCache;
    BufferCache* owner_ = nullptr;  // null: freed, not cached
    std::unique_ptr<char[]> mem_;
    size_t size_ = 0;
  };

  // Keeps at most cap_bytes of returned buffers (0: keeps none, every Get allocates).
  explicit BufferCache(size_t cap_bytes) : cap_(cap_bytes) {}
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // At least `bytes` (at least 1) of uninitialised memory: a cached buffer of at most
  // twice that size where there is one, else a new one.
  Buffer Get(size_t bytes);
  // A buffer of no cache: freed when destroyed.
  static Buffer Uncached(size_t bytes);

  size_t cap_bytes() const { return cap_; }
  size_t cached_bytes() const;
  size_t hits() const;    // Gets served from the cache
  size_t misses() const;  // Gets that allocated

 private:
  void Put(std::unique_ptr<char[]> mem, size_t size);

  const size_t cap_;
  mutable std::mutex mu_;
  std::multimap<size_t, std::unique_ptr<char[]>> free_;  // by size
  size_t cached_ = 0;
  size_t hits_ = 0, misses_ = 0;
};

// A buffer from `cache`, or a plain allocation (freed with the Buffer) where it is null.
inline BufferCache::Buffer TakeBuffer(BufferCache* cache, size_t bytes) {
  return cache != nullptr ? cache->Get(bytes) : BufferCache::Uncached(bytes);
}

}  // namespace chorus
