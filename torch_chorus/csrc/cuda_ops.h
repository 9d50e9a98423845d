// CUDA tensors on chorus's stream forms, the way ProcessGroupNCCL runs them: each op is
// enqueued on torch's current stream of the tensors' device and returns; the Work's
// wait() makes the caller's current stream wait for it (the host does not), its future
// is completed at once as a CUDA-aware future on that stream (DDP's reducer waits on
// the stream), and is_completed() asks a CUDA event. Compiled only where the build
// defines TORCH_CHORUS_CUDA (torch >= 2 with CUDA: tools/gpu/torch_build.sh); the
// Bazel build against a CPU torch refuses CUDA tensors instead.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace torch_chorus {

// Whether any of the op's tensors is a CUDA tensor: the op then takes the CUDA path,
// which requires all of them to be CUDA tensors on one device.
bool AnyCuda(const at::Tensor& t);
bool AnyCuda(const std::vector<at::Tensor>& ts);
bool AnyCuda(const std::vector<std::vector<at::Tensor>>& lists);
template <typename... Args>
bool AnyCudaOf(const Args&... args) {
  return (AnyCuda(args) || ...);
}

// One op on a CUDA stream: `end` is recorded on the stream after the op and its copies.
class ChorusCudaWork : public c10d::Work {
 public:
  // `host_wait`: wait() blocks the host too (barrier, as ProcessGroupNCCL's does).
  ChorusCudaWork(int rank, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                 std::vector<at::Tensor> outputs, std::vector<at::Tensor> used, c10::Device device,
                 std::chrono::milliseconds timeout, bool host_wait);

  // Whether the stream passed the op's end (a failed chorus op: completed, with its error).
  bool isCompleted() override;
  // The caller's current stream waits for the op; the host waits too with `host_wait`
  // or an explicit timeout (then a chorus error or the deadline raises here).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  // Newer torch's Work has it (virtual; the base's would wait on our future, which is
  // completed at once): no `override`, so the older torch without it builds too.
  void blockCurrentStream() { synchronize(); }  // NOLINT(modernize-use-override)
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Records the end event on `stream` and completes the future there (the stream is
  // the device's current one).
  void Enqueued(const c10::cuda::CUDAStream& stream);

 private:
  // Raises the first error chorus reported so far, without blocking.
  void RaiseFailure();

  const std::string what_;
  std::vector<chorus::Work> works_;
  const std::vector<at::Tensor> outputs_;
  const std::vector<at::Tensor> used_;  // held as well as recorded on the stream
  const c10::Device device_;
  const std::chrono::milliseconds timeout_;
  const bool host_wait_;
  at::cuda::CUDAEvent end_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The CUDA forms of ProcessGroupChorus's ops. One CUDA device per process group (as
// chorus's communicator requires): the first op's; a tensor elsewhere is an error
// naming both devices.
class CudaOps {
 public:
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;
  // `seq`: the process group's counter of internal point-to-point tags (all_to_all
  // with split sizes), shared with its CPU ops.
  CudaOps(chorus::Communicator& comm, int rank, int size, std::chrono::milliseconds timeout, std::atomic<uint32_t>& seq,
          uint32_t internal_tag_bit);

  WorkPtr Broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);
  WorkPtr AllReduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  WorkPtr AllReduceCoalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts);
  WorkPtr Reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts);
  WorkPtr AllGather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs);
  WorkPtr AllGatherBase(at::Tensor& output, at::Tensor& input);
  WorkPtr AllGatherCoalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs);
  WorkPtr Gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts);
  WorkPtr Scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts);
  WorkPtr ReduceScatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                        const c10d::ReduceScatterOptions& opts);
  WorkPtr ReduceScatterBase(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts);
  WorkPtr AllToAllBase(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                       std::vector<int64_t>& input_split_sizes);
  WorkPtr AllToAll(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs);
  WorkPtr Send(std::vector<at::Tensor>& tensors, int dst, int tag);
  WorkPtr Recv(std::vector<at::Tensor>& tensors, int src, int tag);
  // On the group's device (or opts.device_ids[0]), the host waiting in wait(); null
  // where the group has run no CUDA op and was given no device (the host barrier serves).
  WorkPtr Barrier(const c10d::BarrierOptions& opts);

 private:
  struct Call;
  // Checks that `ts` are dense CUDA tensors on one device (this group's), and makes that
  // device current for the op; `name` is the op's, for errors.
  Call Begin(const char* name, const std::vector<at::Tensor>& ts);
  WorkPtr Finish(Call& call, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                 std::vector<at::Tensor> outputs, std::vector<at::Tensor> used, bool host_wait = false);
  // all_gather then a local reduction on the stream (BAND, BOR, BXOR); root -1: every rank.
  WorkPtr BitwiseReduce(Call& call, c10d::OpType op, const char* name, at::Tensor& t, c10d::ReduceOp::RedOpType rop,
                        int root);
  // One stream-form send and receive per peer (byte ranges), on an internal tag.
  std::vector<chorus::Work> AllToAllV(const Call& call, const std::vector<const char*>& send,
                                      const std::vector<size_t>& send_bytes, const std::vector<char*>& recv,
                                      const std::vector<size_t>& recv_bytes);

  chorus::Communicator& comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<uint32_t>& seq_;
  const uint32_t internal_tag_bit_;
  std::atomic<int> device_{-1};  // the group's CUDA device, once an op ran
};

}  // namespace torch_chorus
