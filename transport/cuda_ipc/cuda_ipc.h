// CUDA IPC between the processes of one host, without CUDA headers in the caller.
//
// A rank exports what its peers must reach: the device allocation behind a buffer (a
// cudaIpcMemHandle and the buffer's offset in it) and interprocess events; the bytes
// travel to the peers in host messages. A peer maps a buffer once (PeerMappings keeps
// the mapping, keyed by the handle, until it is evicted or the owner is destroyed) and
// opens an event once (PeerEvents), so a repeated call costs no mapping. Mapped memory
// is an ordinary device pointer: kernels and copies on this process's streams read and
// write it directly, on the same GPU or, with peer access, on another one. Several
// processes on ONE GPU work too: CUDA IPC only refuses a process its own handles.
//
// Ordering between processes uses flags in device memory (IpcFlags): a rank's stream
// writes its flag, and the peers' streams, through their mappings of it, wait until it
// has reached that value. Where the driver lacks stream memory operations, interprocess
// events do it: a rank records its event on its stream, tells its peers (host message),
// and they make their streams wait for that record (cudaStreamWaitEvent waits for the
// latest record at the time it is called). Nothing spins on the GPU either way.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::transport::cuda_ipc {

constexpr size_t kHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t) == sizeof(cudaIpcEventHandle_t)

// A device buffer as another process of this host maps it. Plain bytes: it travels in messages.
struct ExportedBuffer {
  uint8_t handle[kHandleBytes];  // the allocation's cudaIpcMemHandle_t
  uint64_t base;                 // the allocation's address in the exporting process
  uint64_t offset;               // of the buffer in that allocation
};

// An interprocess event as another process opens it.
struct ExportedEvent {
  uint8_t handle[kHandleBytes];  // cudaIpcEventHandle_t
};

// A GPU as every process names it (CUDA_VISIBLE_DEVICES may number them differently).
struct DeviceUuid {
  uint8_t bytes[16];
};

// The calling thread's current device, as its UUID (its index, the device a buffer is
// on, DeviceGuard and IsCapturing: kernels/cuda/stream_ops.h).
Result<DeviceUuid> CurrentDevice();
// Whether `device` is visible to this process (CUDA_VISIBLE_DEVICES may hide it; CUDA
// IPC can still map its memory where the GPUs have peer access).
bool Visible(const DeviceUuid& device);
// Whether the current device reaches memory of `device`: it is the same GPU, or a
// visible one with peer access. The error says why not.
Status CanReach(const DeviceUuid& device);
// "GPU-xxxxxxxx-...", as nvidia-smi -L shows a GPU.
inline std::string UuidText(const DeviceUuid& device) {
  const uint8_t* b = device.bytes;
  char s[48];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}
// Waits for everything on `device` (before its interprocess events and mappings go).
Status SynchronizeDevice(int device);

// Exports the cudaMalloc'd allocation that holds `ptr` (memory from cudaMallocAsync
// pools or cuMemCreate cannot be exported this way: the error says so).
Result<ExportedBuffer> Export(const void* ptr);

// Peers' buffers mapped into this process (cudaIpcOpenMemHandle), one mapping per
// allocation of a peer (CUDA refuses to map one twice). An allocation is known by its
// owner and its address there; a new handle at a known address means the owner freed
// the old allocation and made another there: the stale mapping is closed and the new
// one opened. Least recently used first out beyond `max_entries`. A mapping is closed
// only once the last call that used it is done on its stream (EndCall's event).
//
// CUDA documents an owner's cudaFree of a buffer still mapped elsewhere as undefined;
// keeping mappings between calls (what makes a repeated call cost no mapping) relies
// on the driver keeping the memory until the mapping closes, as UCX's cuda_ipc cache
// does by default. PyTorch's caching allocator returns memory to CUDA only in
// empty_cache(); CHORUS_CUDA_IPC=off avoids mapping user buffers at all.
class PeerMappings {
 public:
  explicit PeerMappings(size_t max_entries = 64) : max_entries_(max_entries) {}
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  // The device pointer at the buffer `owner` (a rank) exported: mapped base + offset.
  // Closing a stale or evicted mapping first waits for its last call, until `deadline`.
  Result<void*> Map(int owner, const ExportedBuffer& b, Deadline deadline);
  // The mappings used since the last EndCall are read by work that ends at `done`
  // (null: the call enqueued nothing).
  void EndCall(const std::shared_ptr<kernels::cuda::StreamEvent>& done);

 private:
  struct Entry {
    int owner;
    uint64_t owner_base;
    std::array<uint8_t, kHandleBytes> handle;
    void* base;  // where it is mapped here
    uint64_t last_use;
    std::shared_ptr<kernels::cuda::StreamEvent> last_call;  // reached: nothing reads it any more
    bool in_this_call = false;
  };
  Status Close(std::vector<Entry>::iterator e, Deadline deadline);
  size_t max_entries_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

// An interprocess event of this process (created on the current device).
class IpcEvent {
 public:
  IpcEvent() = default;
  static Result<IpcEvent> Create();
  ~IpcEvent();
  IpcEvent(IpcEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)), exported_(o.exported_) {}
  IpcEvent& operator=(IpcEvent&& o) noexcept {
    std::swap(event_, o.event_);
    std::swap(exported_, o.exported_);
    return *this;
  }
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;

  bool valid() const { return event_ != nullptr; }
  Status Record(void* stream) const;
  const ExportedEvent& exported() const { return exported_; }

 private:
  void* event_ = nullptr;
  ExportedEvent exported_{};
};

// Flags of this process's device memory that its streams write (cuStreamWriteValue32)
// and its peers' streams wait on (kernels::cuda::EnqueueWaitFlagReached on their
// PeerMappings of exported()): ordering between processes without interprocess events.
// Where processes take turns on one GPU (no MPS), a wait on a flag hands the GPU over
// far faster than an interprocess event (docs/design/cuda_ipc.md).
class IpcFlags {
 public:
  IpcFlags() = default;
  // `count` flags, all 0, on the current device; kUnavailable (saying why) where the
  // driver has no stream memory operations or a first write and wait through one fail.
  static Result<IpcFlags> Create(size_t count);
  ~IpcFlags();
  IpcFlags(IpcFlags&& o) noexcept : flags_(std::exchange(o.flags_, nullptr)), exported_(o.exported_) {}
  IpcFlags& operator=(IpcFlags&& o) noexcept {
    std::swap(flags_, o.flags_);
    std::swap(exported_, o.exported_);
    return *this;
  }
  IpcFlags(const IpcFlags&) = delete;
  IpcFlags& operator=(const IpcFlags&) = delete;

  bool valid() const { return flags_ != nullptr; }
  // Flag i := value on `stream`, once the stream's earlier work is done and visible.
  Status Write(void* stream, size_t i, uint32_t value) const;
  const ExportedBuffer& exported() const { return exported_; }

 private:
  uint32_t* flags_ = nullptr;  // device memory
  ExportedBuffer exported_{};
};

// Peers' events opened in this process (cudaIpcOpenEventHandle), kept until destruction.
class PeerEvents {
 public:
  PeerEvents() = default;
  ~PeerEvents();
  PeerEvents(const PeerEvents&) = delete;
  PeerEvents& operator=(const PeerEvents&) = delete;

  // Opens the peer's event (once); the error says why it cannot be.
  Result<void*> Open(const ExportedEvent& e);
  // Makes `stream` wait for the latest record of the peer's event.
  Status StreamWait(void* stream, const ExportedEvent& e);

 private:
  std::vector<std::pair<std::array<uint8_t, kHandleBytes>, void*>> opened_;
};

// cudaMemcpyAsync between device pointers (mapped peer memory included) on `stream`.
Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream);

}  // namespace chorus::transport::cuda_ipc
