#include "transport/shm/segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace chorus::transport::shm {
namespace {

std::string MiB(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    this->~Segment();
    base_ = o.base_;
    bytes_ = o.bytes_;
    path_ = std::move(o.path_);
    owner_ = o.owner_;
    linked_ = o.linked_;
    o.base_ = nullptr;
    o.bytes_ = 0;
    o.owner_ = o.linked_ = false;
  }
  return *this;
}

Segment::~Segment() {
  if (owner_) Unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
}

int64_t FreeBytes(const std::string& dir) {
  struct statvfs s;
  if (statvfs(dir.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

Result<Segment> Segment::Create(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("creating shared-memory segment " + path, errno);
  Segment seg;
  seg.path_ = path;
  seg.owner_ = seg.linked_ = true;
  // posix_fallocate reserves the pages now: on a tmpfs too small the error comes here,
  // not as a SIGBUS at the first touch of a page that does not fit.
  int err = ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    const std::string dir = DirOf(path);
    if (err == ENOSPC) {
      return Unavailable("shared memory: " + dir + " has " + MiB(FreeBytes(dir)) + " free, " + MiB(bytes) +
                         " are needed for this rank's rings (a Docker container's /dev/shm is 64 MiB by "
                         "default: --shm-size, or CHORUS_SHM_DIR elsewhere)");
    }
    return IoError("sizing shared-memory segment " + path + " to " + std::to_string(bytes) + " bytes", err);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  close(fd);
  if (base == MAP_FAILED) return IoError("mapping shared-memory segment " + path, err);
  seg.base_ = base;
  seg.bytes_ = bytes;
  return seg;
}

Result<Segment> Segment::Open(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return IoError("opening a peer's shared-memory segment " + path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return ProtocolError("shared-memory segment " + path + " has " + std::to_string(st.st_size) + " bytes, expected " +
                         std::to_string(bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return IoError("mapping a peer's shared-memory segment " + path, err);
  Segment seg;
  seg.base_ = base;
  seg.bytes_ = bytes;
  seg.path_ = path;
  return seg;
}

void Segment::Unlink() {
  if (!linked_) return;
  unlink(path_.c_str());
  linked_ = false;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, Clock::time_point until) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return;
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  struct timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace chorus::transport::shm
