#include "transport/cuda_ipc/cuda_ipc.h"

#include <cuda.h>  // types only: the driver's one entry point used here is looked up at run time
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"

namespace chorus::transport::cuda_ipc {

using kernels::cuda::CudaError;

namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kHandleBytes, "cudaIpcMemHandle_t is not 64 bytes");
static_assert(sizeof(cudaIpcEventHandle_t) == kHandleBytes, "cudaIpcEventHandle_t is not 64 bytes");

// Every visible device's UUID, asked once (cudaGetDeviceProperties is slow).
const Result<std::vector<DeviceUuid>>& Uuids() {
  static const Result<std::vector<DeviceUuid>> uuids = []() -> Result<std::vector<DeviceUuid>> {
    CHORUS_RETURN_IF_ERROR(kernels::cuda::DeviceStatus());
    std::vector<DeviceUuid> all(kernels::cuda::DeviceCount());
    for (int d = 0; d < static_cast<int>(all.size()); ++d) {
      cudaDeviceProp p{};
      CHORUS_RETURN_IF_ERROR(
          CudaError("cudaGetDeviceProperties(" + std::to_string(d) + ")", cudaGetDeviceProperties(&p, d)));
      static_assert(sizeof(p.uuid.bytes) == sizeof(DeviceUuid::bytes), "cudaUUID_t is not 16 bytes");
      std::memcpy(all[d].bytes, p.uuid.bytes, sizeof(all[d].bytes));
    }
    return all;
  }();
  return uuids;
}

Result<DeviceUuid> UuidOf(int device) {
  const Result<std::vector<DeviceUuid>>& all = Uuids();
  if (!all.ok()) return all.status();
  if (device < 0 || device >= static_cast<int>(all.value().size())) {
    return Status(StatusCode::kInternal, "device " + std::to_string(device) + " is not visible");
  }
  return all.value()[device];
}

// This process's index of `device` (-1: not visible).
int IndexOf(const DeviceUuid& device) {
  const Result<std::vector<DeviceUuid>>& all = Uuids();
  if (!all.ok()) return -1;
  for (size_t d = 0; d < all.value().size(); ++d) {
    if (std::memcmp(all.value()[d].bytes, device.bytes, sizeof(device.bytes)) == 0) return static_cast<int>(d);
  }
  return -1;
}

// cuMemGetAddressRange from the driver (kernels::cuda::DriverFunction), looked up once.
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
AddressRangeFn AddressRange() {
  static const auto fn = reinterpret_cast<AddressRangeFn>(kernels::cuda::DriverFunction("cuMemGetAddressRange"));
  return fn;
}

}  // namespace

Result<DeviceUuid> CurrentDevice() {
  Result<int> d = kernels::cuda::CurrentDeviceIndex();
  if (!d.ok()) return d.status();
  return UuidOf(d.value());
}

Status SynchronizeDevice(int device) {
  Result<kernels::cuda::DeviceGuard> g = kernels::cuda::DeviceGuard::Set(device);
  if (!g.ok()) return g.status();
  return CudaError("cudaDeviceSynchronize(" + std::to_string(device) + ")", cudaDeviceSynchronize());
}

bool Visible(const DeviceUuid& device) { return IndexOf(device) >= 0; }

Status CanReach(const DeviceUuid& device) {
  Result<int> current = kernels::cuda::CurrentDeviceIndex();
  if (!current.ok()) return current.status();
  const int cur = current.value(), d = IndexOf(device);
  if (d < 0) {
    return Status(StatusCode::kUnavailable,
                  UuidText(device) + " is not visible to this process (CUDA_VISIBLE_DEVICES?)");
  }
  if (d == cur) return Status::Ok();
  int can = 0;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaDeviceCanAccessPeer", cudaDeviceCanAccessPeer(&can, cur, d)));
  if (can) return Status::Ok();
  return Status(StatusCode::kUnavailable, "device " + std::to_string(cur) + " has no peer access to device " +
                                              std::to_string(d) + " (" + UuidText(device) + ")");
}

Result<ExportedBuffer> Export(const void* ptr) {
  AddressRangeFn range = AddressRange();
  if (range == nullptr) {
    return Status(StatusCode::kUnavailable, "the driver has no cuMemGetAddressRange: cannot export device buffers");
  }
  // The driver call needs the device's primary context current on this thread:
  // cudaSetDevice makes it so (and, unlike the cudaFree(0) idiom, never synchronises).
  Result<int> device = kernels::cuda::CurrentDeviceIndex();
  if (!device.ok()) return device.status();
  CHORUS_RETURN_IF_ERROR(CudaError("cudaSetDevice (make the context current)", cudaSetDevice(device.value())));
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  CUresult r = range(&base, &size, p);
  if (r != CUDA_SUCCESS) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", ptr);
    return Status(StatusCode::kInvalidArgument,
                  std::string("cuMemGetAddressRange(") + addr + ") failed with CUresult " + std::to_string(r));
  }
  cudaIpcMemHandle_t h;
  char addr[32];
  std::snprintf(addr, sizeof(addr), "%p", reinterpret_cast<void*>(base));
  CHORUS_RETURN_IF_ERROR(
      CudaError(std::string("cudaIpcGetMemHandle of the allocation at ") + addr + " (" + std::to_string(size) +
                    " bytes; memory from cudaMallocAsync pools or cuMemCreate cannot be exported this way)",
                cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base))));
  ExportedBuffer b{};
  std::memcpy(b.handle, &h, kHandleBytes);
  b.base = base;
  b.offset = p - base;
  return b;
}

PeerMappings::~PeerMappings() {
  // A mapping whose last call is still running (a peer died, say) is left open: closing
  // it under a running kernel would be worse than the leak.
  for (const Entry& e : entries_) {
    if (e.last_call && !e.last_call->Wait(Deadline::AfterMs(10000), "a call reading a peer's buffer").ok()) continue;
    cudaIpcCloseMemHandle(e.base);
  }
  cudaGetLastError();
}

Status PeerMappings::Close(std::vector<Entry>::iterator e, Deadline deadline) {
  if (e->last_call) CHORUS_RETURN_IF_ERROR(e->last_call->Wait(deadline, "the last call reading a peer's buffer"));
  cudaIpcCloseMemHandle(e->base);
  cudaGetLastError();
  entries_.erase(e);
  return Status::Ok();
}

Result<void*> PeerMappings::Map(int owner, const ExportedBuffer& b, Deadline deadline) {
  std::array<uint8_t, kHandleBytes> handle;
  std::memcpy(handle.data(), b.handle, kHandleBytes);
  ++clock_;
  auto known = std::find_if(entries_.begin(), entries_.end(),
                            [&](const Entry& e) { return e.owner == owner && e.owner_base == b.base; });
  if (known != entries_.end() && known->handle == handle) {
    known->last_use = clock_;
    known->in_this_call = true;
    return static_cast<void*>(static_cast<char*>(known->base) + b.offset);
  }
  if (known != entries_.end()) CHORUS_RETURN_IF_ERROR(Close(known, deadline));  // freed and allocated again there
  if (entries_.size() >= max_entries_) {
    // The least recently used mapping that this call does not use.
    auto lru = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (!e->in_this_call && (lru == entries_.end() || e->last_use < lru->last_use)) lru = e;
    }
    if (lru != entries_.end()) CHORUS_RETURN_IF_ERROR(Close(lru, deadline));
  }
  cudaIpcMemHandle_t h;
  std::memcpy(&h, b.handle, kHandleBytes);
  void* base = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaIpcOpenMemHandle (mapping rank " + std::to_string(owner) + "'s device buffer)",
                                   cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess)));
  entries_.push_back(Entry{owner, b.base, handle, base, clock_, nullptr, true});
  return static_cast<void*>(static_cast<char*>(base) + b.offset);
}

void PeerMappings::EndCall(const std::shared_ptr<kernels::cuda::StreamEvent>& done) {
  for (Entry& e : entries_) {
    if (!e.in_this_call) continue;
    e.in_this_call = false;
    if (done) e.last_call = done;
  }
}

Result<IpcEvent> IpcEvent::Create() {
  CHORUS_RETURN_IF_ERROR(kernels::cuda::DeviceStatus());
  IpcEvent ev;
  cudaEvent_t e = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventCreateWithFlags(interprocess)",
                                   cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess)));
  ev.event_ = e;
  cudaIpcEventHandle_t h;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaIpcGetEventHandle", cudaIpcGetEventHandle(&h, e)));
  std::memcpy(ev.exported_.handle, &h, kHandleBytes);
  return std::move(ev);
}

IpcEvent::~IpcEvent() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Status IpcEvent::Record(void* stream) const {
  return CudaError("cudaEventRecord (interprocess event)",
                   cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)));
}

Result<IpcFlags> IpcFlags::Create(size_t count) {
  CHORUS_RETURN_IF_ERROR(kernels::cuda::DeviceStatus());
  if (!kernels::cuda::SignalFlags::DriverHasThem()) {
    return Status(StatusCode::kUnavailable, "the driver has no stream memory operations (cuStreamWriteValue32)");
  }
  IpcFlags w;
  void* p = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaMalloc of " + std::to_string(count) + " flags", cudaMalloc(&p, count * 4)));
  w.flags_ = static_cast<uint32_t*>(p);
  // Zeroed, with one write and one wait between, on a private stream: where the driver
  // refuses them, the caller knows now (and orders its calls with events instead).
  Result<kernels::cuda::Stream> probe = kernels::cuda::Stream::Create();
  if (!probe.ok()) return probe.status();
  const auto zero = [&] {
    return CudaError("cudaMemsetAsync of the flags",
                     cudaMemsetAsync(p, 0, count * 4, static_cast<cudaStream_t>(probe->get())));
  };
  Status st = zero();
  if (st.ok()) st = w.Write(probe->get(), 0, 1);
  if (st.ok()) st = kernels::cuda::EnqueueWaitFlagReached(probe->get(), w.flags_, 1);
  if (st.ok()) st = zero();
  if (st.ok()) st = kernels::cuda::Synchronize(probe->get());
  if (!st.ok()) return Status(StatusCode::kUnavailable, "stream memory operations on device flags: " + st.message());
  Result<ExportedBuffer> ex = Export(p);
  if (!ex.ok()) return ex.status();
  w.exported_ = ex.value();
  return std::move(w);
}

IpcFlags::~IpcFlags() {
  if (flags_ != nullptr) cudaFree(flags_);
}

Status IpcFlags::Write(void* stream, size_t i, uint32_t value) const {
  return kernels::cuda::EnqueueWriteFlag(stream, flags_ + i, value);
}

PeerEvents::~PeerEvents() {
  for (auto& [key, e] : opened_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  cudaGetLastError();
}

Result<void*> PeerEvents::Open(const ExportedEvent& ev) {
  std::array<uint8_t, kHandleBytes> key;
  std::memcpy(key.data(), ev.handle, kHandleBytes);
  for (auto& [k, e] : opened_) {
    if (k == key) return e;
  }
  cudaIpcEventHandle_t h;
  std::memcpy(&h, ev.handle, kHandleBytes);
  cudaEvent_t e = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaIpcOpenEventHandle (a peer's event)", cudaIpcOpenEventHandle(&e, h)));
  opened_.push_back({key, e});
  return static_cast<void*>(e);
}

Status PeerEvents::StreamWait(void* stream, const ExportedEvent& ev) {
  Result<void*> e = Open(ev);
  if (!e.ok()) return e.status();
  return CudaError("cudaStreamWaitEvent (a peer's event)",
                   cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(e.value()), 0));
}

Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return Status::Ok();
  return CudaError("cudaMemcpyAsync of " + std::to_string(bytes) + " bytes (CUDA IPC)",
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

}  // namespace chorus::transport::cuda_ipc
