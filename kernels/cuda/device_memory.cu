#include "kernels/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/reduce_cuda.h"

namespace chorus::kernels::cuda {

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  DeviceBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_RETURN_IF_ERROR(CudaError("cudaMalloc of " + std::to_string(bytes) + " bytes", cudaMalloc(&b.ptr_, bytes)));
  b.bytes_ = bytes;
  return std::move(b);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<Stream> Stream::Create() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  Stream st;
  cudaStream_t s = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)));
  st.s_ = s;
  return std::move(st);
}

Stream::~Stream() {
  if (s_) cudaStreamDestroy(static_cast<cudaStream_t>(s_));
}

// From pageable memory cudaMemcpy may return before the DMA landed, and non-blocking
// streams do not wait for the legacy stream it ran on: wait for it.
Status CopyToDevice(void* dst, const void* src, size_t bytes) {
  CHORUS_RETURN_IF_ERROR(CudaError("cudaMemcpy host->device of " + std::to_string(bytes) + " bytes",
                                   cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)));
  return CudaError("cudaStreamSynchronize after a copy to the device", cudaStreamSynchronize(nullptr));
}

Status CopyToHost(void* dst, const void* src, size_t bytes) {
  return CudaError("cudaMemcpy device->host of " + std::to_string(bytes) + " bytes",
                   cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return CudaError("cudaMemcpyAsync of " + std::to_string(bytes) + " bytes",
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes, void* stream) {
  return CudaError("cudaMemcpyAsync device->device of " + std::to_string(bytes) + " bytes",
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

Status Memset(void* dst, int value, size_t bytes) {
  CHORUS_RETURN_IF_ERROR(CudaError("cudaMemset of " + std::to_string(bytes) + " bytes", cudaMemset(dst, value, bytes)));
  return CudaError("cudaStreamSynchronize after a memset", cudaStreamSynchronize(nullptr));
}

Status Synchronize(void* stream) {
  return CudaError("cudaStreamSynchronize", cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

Status SetDevice(int device) {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  return CudaError("cudaSetDevice(" + std::to_string(device) + ")", cudaSetDevice(device));
}

Result<EventTimer> EventTimer::Create() {
  CHORUS_RETURN_IF_ERROR(DeviceStatus());
  EventTimer t;
  cudaEvent_t a = nullptr, b = nullptr;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventCreate", cudaEventCreate(&a)));
  t.start_ = a;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventCreate", cudaEventCreate(&b)));
  t.stop_ = b;
  return std::move(t);
}

EventTimer::~EventTimer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

Status EventTimer::Start() { return CudaError("cudaEventRecord", cudaEventRecord(static_cast<cudaEvent_t>(start_))); }

Result<double> EventTimer::StopMs() {
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventRecord", cudaEventRecord(static_cast<cudaEvent_t>(stop_))));
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventSynchronize", cudaEventSynchronize(static_cast<cudaEvent_t>(stop_))));
  float ms = 0;
  CHORUS_RETURN_IF_ERROR(CudaError("cudaEventElapsedTime", cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_),
                                                                                static_cast<cudaEvent_t>(stop_))));
  return static_cast<double>(ms);
}

}  // namespace chorus::kernels::cuda
