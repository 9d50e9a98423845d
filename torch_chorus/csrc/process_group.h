// torch.distributed's process group on chorus: backend "chorus" (torch_chorus).
//
// Each torch op checks its tensors, maps them onto one chorus call (a contiguous
// staging tensor where a tensor is not contiguous or a list must be packed) and returns a
// ChorusWork at once; the call runs on the communicator's executor (collectives) or
// its transport (point-to-point). Rendezvous goes through the c10d::Store torch hands
// the backend, and torch's timeout becomes chorus's (CHORUS_TIMEOUT).
#pragma once

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "chorus/communicator.h"

namespace torch_chorus {

// torch 2.x registers a c10d::Backend under a ProcessGroup; 1.13 takes the ProcessGroup.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

class FutureMarker;
#ifdef TORCH_CHORUS_CUDA
class CudaOps;  // cuda_ops.h
#endif

// One torch op: the chorus works it waits for, then `finish` (copies out of staging tensors,
// a local reduction), once. Errors surface from wait() as RuntimeError, and through
// exception() and the future.
class ChorusWork : public c10d::Work {
 public:
  // `buffers`: every tensor chorus reads or writes (inputs, staging tensors), held until the
  // op is settled.
  ChorusWork(int rank, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
             std::vector<at::Tensor> outputs, std::vector<at::Tensor> buffers, std::function<void()> finish,
             std::chrono::milliseconds timeout, std::weak_ptr<FutureMarker> marker);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Whether the chorus works ended (settled or not); never blocks.
  bool Done();
  // Waits up to `timeout` for the chorus works and finishes the op; false while they
  // run on. With `give_up`, an op still running then fails with a timeout.
  bool Settle(std::chrono::milliseconds timeout, bool give_up);

 private:
  const std::string what_;  // "all_reduce of 1024 float32 (sum)", for errors
  std::vector<chorus::Work> works_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> buffers_;  // under settle_mu_
  std::function<void()> finish_;
  const std::chrono::milliseconds timeout_;
  std::weak_ptr<FutureMarker> marker_;
  std::mutex settle_mu_;  // one thread settles; held while it waits
  std::mutex future_mu_;
  bool settled_ = false;  // under future_mu_
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupChorus : public BackendBase {
 public:
  // Collective: every rank of the group calls it with torch's store for the group.
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  // "rank 0 of 2 on host-a, tcp/epoll ..." (chorus::Communicator::Describe).
  std::string Describe() const;
  chorus::Communicator& communicator() { return *comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  c10::intrusive_ptr<c10d::Work> MakeWork(c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                                          std::vector<at::Tensor> outputs, std::vector<at::Tensor> buffers,
                                          std::function<void()> finish = nullptr);
  // A bitwise reduction (BAND, BOR, BXOR), which chorus's kernels lack: every rank's
  // input all-gathered, then reduced here. `root` -1: every rank keeps the result.
  c10::intrusive_ptr<c10d::Work> BitwiseReduce(c10d::OpType op, const char* name, at::Tensor& tensor,
                                               c10d::ReduceOp::RedOpType rop, int root);
  // all_to_all with per-peer sizes, which chorus's AllToAll (equal parts) does not
  // take: one send and one receive per peer, on tags of their own.
  std::vector<chorus::Work> AllToAllV(const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
                                      const std::vector<void*>& recv, const std::vector<size_t>& recv_bytes);

  std::unique_ptr<chorus::Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::atomic<uint32_t> alltoallv_seq_{0};
  std::shared_ptr<FutureMarker> marker_;
#ifdef TORCH_CHORUS_CUDA
  std::unique_ptr<CudaOps> cuda_;  // ops on CUDA tensors
#endif
};

}  // namespace torch_chorus
