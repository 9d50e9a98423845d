// CUDA IPC in a CPU-only build (docs/design/cuda_optional.md): nothing to export, map
// or open; every call says chorus was built without CUDA.
#include "kernels/cuda/cpu_only.h"
#include "transport/cuda_ipc/cuda_ipc.h"

namespace chorus::transport::cuda_ipc {

using kernels::cuda::BuiltWithoutCuda;

Result<DeviceUuid> CurrentDevice() { return BuiltWithoutCuda("the current CUDA device"); }
bool Visible(const DeviceUuid&) { return false; }
Status CanReach(const DeviceUuid& device) { return BuiltWithoutCuda("reaching " + UuidText(device)); }
Status SynchronizeDevice(int device) { return BuiltWithoutCuda("waiting for CUDA device " + std::to_string(device)); }
Result<ExportedBuffer> Export(const void*) { return BuiltWithoutCuda("exporting a device buffer (CUDA IPC)"); }

PeerMappings::~PeerMappings() = default;
Result<void*> PeerMappings::Map(int owner, const ExportedBuffer&, Deadline) {
  return BuiltWithoutCuda("mapping a buffer of rank " + std::to_string(owner) + " (CUDA IPC)");
}
void PeerMappings::EndCall(const std::shared_ptr<kernels::cuda::StreamEvent>&) {}  // nothing is ever mapped

Result<IpcEvent> IpcEvent::Create() { return BuiltWithoutCuda("an interprocess event (CUDA IPC)"); }
IpcEvent::~IpcEvent() = default;
Status IpcEvent::Record(void*) const { return BuiltWithoutCuda("recording an interprocess event (CUDA IPC)"); }

Result<IpcFlags> IpcFlags::Create(size_t count) {
  return BuiltWithoutCuda(std::to_string(count) + " interprocess signal flags (CUDA IPC)");
}
IpcFlags::~IpcFlags() = default;
Status IpcFlags::Write(void*, size_t, uint32_t) const {
  return BuiltWithoutCuda("a stream write of an interprocess signal flag (CUDA IPC)");
}

PeerEvents::~PeerEvents() = default;
Result<void*> PeerEvents::Open(const ExportedEvent&) { return BuiltWithoutCuda("opening a peer's event (CUDA IPC)"); }
Status PeerEvents::StreamWait(void*, const ExportedEvent&) {
  return BuiltWithoutCuda("a CUDA stream waiting for a peer's event (CUDA IPC)");
}

Status CopyAsync(void*, const void*, size_t bytes, void*) {
  return BuiltWithoutCuda("a copy of " + std::to_string(bytes) + " bytes between device buffers (CUDA IPC)");
}

}  // namespace chorus::transport::cuda_ipc
