#include "common/buffer_cache.h"

#include <utility>

namespace chorus {

BufferCache::Buffer& BufferCache::Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Reset();
    owner_ = std::exchange(o.owner_, nullptr);
    mem_ = std::move(o.mem_);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void BufferCache::Buffer::Reset() {
  if (mem_ && owner_ != nullptr) owner_->Put(std::move(mem_), size_);
  mem_.reset();
  owner_ = nullptr;
  size_ = 0;
}

BufferCache::Buffer BufferCache::Get(size_t bytes) {
  if (bytes == 0) bytes = 1;
  Buffer b;
  b.owner_ = this;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first / 2 <= bytes) {
      b.size_ = it->first;
      b.mem_ = std::move(it->second);
      cached_ -= it->first;
      free_.erase(it);
      ++hits_;
      return b;
    }
    ++misses_;
  }
  b.mem_.reset(new char[bytes]);
  b.size_ = bytes;
  return b;
}

void BufferCache::Put(std::unique_ptr<char[]> mem, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ + size > cap_) return;  // over the cap: freed (mem goes out of scope)
  cached_ += size;
  free_.emplace(size, std::move(mem));
}

size_t BufferCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}
size_t BufferCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
size_t BufferCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

BufferCache::Buffer BufferCache::Uncached(size_t bytes) {
  Buffer b;
  b.size_ = bytes > 0 ? bytes : 1;
  b.mem_.reset(new char[b.size_]);
  return b;
}

}  // namespace chorus
