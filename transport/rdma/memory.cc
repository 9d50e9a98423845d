#include "transport/rdma/memory.h"

#include <unistd.h>

#include <cerrno>

namespace chorus::transport::rdma {

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::Register(const Device& dev, void* addr, size_t len, int access) {
  ibv_mr* mr = dev.verbs().reg_mr(dev.pd(), addr, len, access);
  if (mr == nullptr) {
    return IoError("ibv_reg_mr of " + std::to_string(len) + " bytes at " +
                       std::to_string(reinterpret_cast<uintptr_t>(addr)) + " on " + dev.name(),
                   errno);
  }
  return std::unique_ptr<MemoryRegion>(new MemoryRegion(dev, mr));
}

MemoryRegion::~MemoryRegion() { dev_.verbs().dereg_mr(mr_); }

Result<RegistrationCache::Entry*> RegistrationCache::Acquire(const void* addr, size_t len, uint64_t group,
                                                             bool cacheable) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(addr), e = b + len;
  if (cacheable) {
    for (Entry& x : entries_) {
      if (x.cached && x.group == group && x.begin <= b && e <= x.end) {
        ++x.users;
        return &x;
      }
    }
  }
  // Whole pages: neighbouring chunks of one buffer then often share a registration.
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t pb = b & ~(page - 1), pe = (e + page - 1) & ~(page - 1);
  Result<std::unique_ptr<MemoryRegion>> mr = MemoryRegion::Register(dev_, reinterpret_cast<void*>(pb), pe - pb,
                                                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr.ok()) return mr.status();
  Entry& x = entries_.emplace_back();
  x.begin = pb;
  x.end = pe;
  x.group = group;
  x.cached = cacheable;
  x.users = 1;
  x.mr = std::move(mr.value());
  return &x;
}

void RegistrationCache::Release(Entry* e) {
  if (--e->users > 0 || e->cached) return;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (&*it == e) {
      entries_.erase(it);
      return;
    }
  }
}

void RegistrationCache::ReleaseGroups(uint64_t first, uint64_t last) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->cached && it->group >= first && it->group <= last) {
      it->cached = false;
      if (it->users == 0) {
        it = entries_.erase(it);
        continue;
      }
    }
    ++it;
  }
}

}  // namespace chorus::transport::rdma
