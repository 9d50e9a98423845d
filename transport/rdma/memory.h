// Registered memory: an RAII memory region, and the registration cache for user
// buffers.
//
// Why the cache is scoped to a call: a registration pins the pages that backed an
// address range when it was made. If the application frees a buffer and a later
// allocation reuses the address, a cached registration would still point at the old
// pages, and RDMA would read or write memory nobody owns. Within one collective call
// the caller's buffers cannot change, so registrations are reused across the call's
// chunks and steps (keyed by its tag group) and dropped when the call's tags are
// released; point-to-point buffers are registered per request.
#pragma once

#include <cstdint>
#include <list>
#include <memory>

#include "common/status.h"
#include "transport/rdma/device.h"

namespace chorus::transport::rdma {

class MemoryRegion {
 public:
  static Result<std::unique_ptr<MemoryRegion>> Register(const Device& dev, void* addr, size_t len, int access);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }

 private:
  MemoryRegion(const Device& dev, ibv_mr* mr) : dev_(dev), mr_(mr) {}
  const Device& dev_;
  ibv_mr* mr_;
};

class RegistrationCache {
 public:
  struct Entry {
    uintptr_t begin = 0, end = 0;
    uint64_t group = 0;
    bool cached = false;  // kept for the rest of the call when idle
    int users = 0;
    std::unique_ptr<MemoryRegion> mr;
  };

  explicit RegistrationCache(const Device& dev) : dev_(dev) {}
  // A registration covering [addr, addr + len) for local reads and remote writes.
  // `cacheable`: the range belongs to call `group` and may be reused until ReleaseGroups.
  Result<Entry*> Acquire(const void* addr, size_t len, uint64_t group, bool cacheable);
  void Release(Entry* e);
  // The calls [first, last] finished: their idle registrations go.
  void ReleaseGroups(uint64_t first, uint64_t last);
  // Deregisters everything (abort): remote writes into user memory fail from now on.
  void Clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  const Device& dev_;
  std::list<Entry> entries_;
};

}  // namespace chorus::transport::rdma
