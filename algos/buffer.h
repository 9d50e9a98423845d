// Byte-level helpers for the algorithms: element offsets into user buffers, the
// local copy of world-size-1 and out-of-place calls, and a pool of chunk-sized
// scratch buffers that are recycled once the send reading them has completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "algos/chunking.h"
#include "common/buffer_cache.h"
#include "common/status.h"
#include "transport/transport.h"

namespace chorus::algos {

inline char* At(void* base, size_t elem_offset, size_t elem_size) {
  return static_cast<char*>(base) + elem_offset * elem_size;
}
inline const char* At(const void* base, size_t elem_offset, size_t elem_size) {
  return static_cast<const char*>(base) + elem_offset * elem_size;
}

// Copies unless the two buffers are the same memory (the in-place convention).
inline void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

// Chunk-sized scratch buffers. A slot is either free, held by the algorithm
// (Acquire .. Release), or guarded by a send that reads it (ReleaseAfter): it becomes
// free again when that send completes. Acquire never waits for a send: when every
// slot is busy it allocates another one, so an algorithm can never deadlock on its
// own scratch (a peer that is slow to receive only costs memory, at most the
// message). In steady state the pool stays at a few chunks.
class ChunkPool {
 public:
  // Slots come from `cache` (null: plain allocations) and go back to it with the pool.
  ChunkPool(size_t slot_bytes, BufferCache* cache) : slot_bytes_(slot_bytes), cache_(cache) {}

  // A free slot's index; fails only when a send that guarded a slot failed.
  Result<int> Acquire() {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.held) continue;
      if (s.guard != nullptr) {
        if (!s.guard->Test()) continue;
        Status st = s.guard->status();
        if (!st.ok()) return st;
        s.guard.reset();
      }
      s.held = true;
      return static_cast<int>(i);
    }
    slots_.push_back(Slot{TakeBuffer(cache_, slot_bytes_), nullptr, true});
    return static_cast<int>(slots_.size() - 1);
  }
  char* data(int slot) { return slots_[static_cast<size_t>(slot)].mem.data(); }
  void Release(int slot) { slots_[static_cast<size_t>(slot)].held = false; }
  // The slot is free again once `send` completes.
  void ReleaseAfter(int slot, transport::RequestPtr send) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    s.held = false;
    s.guard = std::move(send);
  }
  size_t slots() const { return slots_.size(); }

 private:
  struct Slot {
    BufferCache::Buffer mem;
    transport::RequestPtr guard;
    bool held = false;
  };
  const size_t slot_bytes_;
  BufferCache* const cache_;
  std::vector<Slot> slots_;
};

}  // namespace chorus::algos
