#include "torch_chorus/csrc/cuda_ops.h"

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <thread>

#include "torch_chorus/csrc/tensor_args.h"

namespace torch_chorus {

bool AnyCuda(const at::Tensor& t) { return t.defined() && t.is_cuda(); }

bool AnyCuda(const std::vector<at::Tensor>& ts) {
  return std::any_of(ts.begin(), ts.end(), [](const at::Tensor& t) { return AnyCuda(t); });
}

bool AnyCuda(const std::vector<std::vector<at::Tensor>>& lists) {
  return std::any_of(lists.begin(), lists.end(), [](const std::vector<at::Tensor>& l) { return AnyCuda(l); });
}

// ---- ChorusCudaWork ---------------------------------------------------------

ChorusCudaWork::ChorusCudaWork(int rank, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                               std::vector<at::Tensor> outputs, std::vector<at::Tensor> used, c10::Device device,
                               std::chrono::milliseconds timeout, bool host_wait)
    : c10d::Work(rank, op),
      what_(std::move(what)),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      used_(std::move(used)),
      device_(device),
      timeout_(timeout),
      host_wait_(host_wait) {}

void ChorusCudaWork::Enqueued(const c10::cuda::CUDAStream& stream) {
  end_.record(stream);
  // As ProcessGroupNCCL: completed now, on the op's stream (the device's current one),
  // so that the future's users wait on the stream, not the host.
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     std::vector<c10::Device>{device_});
  future_->markCompleted(c10::IValue(outputs_));
}

void ChorusCudaWork::RaiseFailure() {
  for (chorus::Work& w : works_) {
    if (!w.Test()) continue;
    chorus::Status st = w.Wait(std::chrono::milliseconds(0));
    if (st.ok()) continue;
    auto error = std::make_exception_ptr(std::runtime_error("chorus: " + what_ + " failed: " + st.ToString()));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!completed_) {
        completed_ = true;
        exception_ = error;
      }
    }
    std::rethrow_exception(error);
  }
}

bool ChorusCudaWork::isCompleted() {
  try {
    RaiseFailure();
  } catch (const std::exception&) {
    return true;  // failed: exception() says why
  }
  if (!end_.query()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  completed_ = true;
  return true;
}

bool ChorusCudaWork::wait(std::chrono::milliseconds timeout) {
  RaiseFailure();
  if (host_wait_ || timeout != kNoTimeout) {
    const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (chorus::Work& w : works_) {
      const auto left =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                   std::chrono::milliseconds(0));
      chorus::Status st = w.Wait(left);
      if (st.code() == chorus::StatusCode::kTimeout && !w.Test()) {
        throw std::runtime_error("chorus: " + what_ + " did not complete within " + std::to_string(limit.count()) +
                                 " ms");
      }
    }
    RaiseFailure();
    // The copies after the op (staging tensors back) end at the event.
    while (!end_.query()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("chorus: " + what_ + " did not complete on its CUDA stream within " +
                                 std::to_string(limit.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  synchronize();
  return true;
}

void ChorusCudaWork::synchronize() {
  c10::cuda::CUDAGuard guard(device_.index());
  end_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
}

// ---- CudaOps ----------------------------------------------------------------

namespace {

void CheckCudaLike(const std::vector<at::Tensor>& ts, const at::Tensor& first, const char* name, const char* which) {
  for (const at::Tensor& t : ts) {
    TORCH_CHECK(t.scalar_type() == first.scalar_type(), "chorus: ", name, ": ", which, " tensors must all be ",
                first.scalar_type(), ", got ", t.scalar_type());
    TORCH_CHECK(t.numel() == first.numel(), "chorus: ", name, ": ", which, " tensors must all have ", first.numel(),
                " elements, got ", t.numel());
  }
}

std::vector<at::Tensor> Flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return all;
}

}  // namespace

struct CudaOps::Call {
  c10::Device device;
  std::unique_ptr<c10::cuda::CUDAGuard> guard;  // the device current during the op
  c10::cuda::CUDAStream stream;
  chorus::CudaStream chorus_stream;
};

CudaOps::CudaOps(chorus::Communicator& comm, int rank, int size, std::chrono::milliseconds timeout,
                 std::atomic<uint32_t>& seq, uint32_t internal_tag_bit)
    : comm_(comm), rank_(rank), size_(size), timeout_(timeout), seq_(seq), internal_tag_bit_(internal_tag_bit) {}

CudaOps::Call CudaOps::Begin(const char* name, const std::vector<at::Tensor>& ts) {
  std::optional<c10::Device> device;
  for (const at::Tensor& t : ts) {
    if (!t.defined()) continue;
    TORCH_CHECK(t.layout() == c10::kStrided, "chorus: ", name, " does not support ", t.layout(),
                " tensors (dense tensors only)");
    if (!device) device = t.device();
    TORCH_CHECK(t.is_cuda() && t.device() == *device, "chorus: ", name,
                " takes tensors on one CUDA device (or all on the CPU), got tensors on ", *device, " and ", t.device());
  }
  TORCH_CHECK(device.has_value(), "chorus: ", name, " got no tensors");
  TORCH_CHECK(device->is_cuda(), "chorus: ", name, " takes tensors on one CUDA device (or all on the CPU), got ",
              *device);
  int expected = -1;
  if (!device_.compare_exchange_strong(expected, device->index())) {
    TORCH_CHECK(expected == device->index(), "chorus: ", name, ": this process group runs on cuda:", expected,
                " (its first CUDA op's device), got tensors on ", *device, " (one device per process group)");
  }
  auto guard = std::make_unique<c10::cuda::CUDAGuard>(device->index());
  c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device->index());
  return Call{*device, std::move(guard), stream, chorus::CudaStream{static_cast<void*>(stream.stream())}};
}

CudaOps::WorkPtr CudaOps::Finish(Call& call, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                                 std::vector<at::Tensor> outputs, std::vector<at::Tensor> used, bool host_wait) {
  // Bad arguments fail at the call, as on the CPU.
  for (chorus::Work& w : works) {
    if (!w.Test()) continue;
    chorus::Status st = w.Wait(std::chrono::milliseconds(0));
    TORCH_CHECK(st.ok(), "chorus: ", what, " failed: ", st.ToString());
  }
  // The caching allocator must not hand the memory to another stream before this one
  // is past the op (a tensor made on another stream, or freed by the caller now).
  for (const at::Tensor& t : used) {
    if (t.defined() && t.numel() > 0)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), call.stream);
  }
  auto work = c10::make_intrusive<ChorusCudaWork>(rank_, op, std::move(what), std::move(works), std::move(outputs),
                                                  std::move(used), call.device, timeout_, host_wait);
  work->Enqueued(call.stream);
  return work;
}

CudaOps::WorkPtr CudaOps::Broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: broadcast takes one tensor per process, got ", tensors.size());
  CheckRoot(opts.rootRank, size_, "broadcast");
  Call c = Begin("broadcast", tensors);
  at::Tensor& t = tensors[0];
  at::Tensor buf = Dense(t);
  const Elements e = MovedAs(buf);
  chorus::Work w = comm_.Broadcast(Ptr(buf), e.count, e.dtype, static_cast<int>(opts.rootRank), c.chorus_stream);
  if (!buf.is_same(t)) t.copy_(buf);
  return Finish(c, c10d::OpType::BROADCAST, OpName("broadcast", t), {w}, tensors, {t, buf});
}

CudaOps::WorkPtr CudaOps::AllReduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: all_reduce takes one tensor per process, got ", tensors.size());
  Call c = Begin("all_reduce", tensors);
  at::Tensor& t = tensors[0];
  if (IsBitwise(opts.reduceOp)) return BitwiseReduce(c, c10d::OpType::ALLREDUCE, "all_reduce", t, opts.reduceOp, -1);
  const Reduction r = ReducedAs(t, opts.reduceOp, "all_reduce");
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_.AllReduce(Ptr(buf), Ptr(buf), buf.numel(), r.dtype, r.op, c.chorus_stream);
  if (!buf.is_same(t)) t.copy_(buf);
  return Finish(c, c10d::OpType::ALLREDUCE, OpName("all_reduce", t), {w}, tensors, {t, buf});
}

CudaOps::WorkPtr CudaOps::AllReduceCoalesced(std::vector<at::Tensor>& tensors,
                                             const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: all_reduce_coalesced needs at least one tensor");
  Call c = Begin("all_reduce_coalesced", tensors);
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "chorus: all_reduce_coalesced: tensors must all be ",
                tensors[0].scalar_type(), ", got ", t.scalar_type());
  }
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: all_reduce_coalesced does not support bitwise ops");
  const Reduction r = ReducedAs(tensors[0], opts.reduceOp, "all_reduce_coalesced");
  at::Tensor flat = Packed(tensors);
  chorus::Work w = comm_.AllReduce(Ptr(flat), Ptr(flat), flat.numel(), r.dtype, r.op, c.chorus_stream);
  Unpack(flat, tensors);
  std::vector<at::Tensor> used = tensors;
  used.push_back(flat);
  return Finish(c, c10d::OpType::ALLREDUCE_COALESCED, OpName("all_reduce_coalesced", flat), {w}, tensors,
                std::move(used));
}

CudaOps::WorkPtr CudaOps::Reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: reduce takes one tensor per process, got ", tensors.size());
  CheckRoot(opts.rootRank, size_, "reduce");
  Call c = Begin("reduce", tensors);
  at::Tensor& t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  if (IsBitwise(opts.reduceOp)) return BitwiseReduce(c, c10d::OpType::REDUCE, "reduce", t, opts.reduceOp, root);
  const Reduction r = ReducedAs(t, opts.reduceOp, "reduce");
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_.Reduce(Ptr(buf), Ptr(buf), buf.numel(), r.dtype, r.op, root, c.chorus_stream);
  if (rank_ == root && !buf.is_same(t)) t.copy_(buf);
  return Finish(c, c10d::OpType::REDUCE, OpName("reduce", t), {w}, tensors, {t, buf});
}

CudaOps::WorkPtr CudaOps::BitwiseReduce(Call& c, c10d::OpType op, const char* name, at::Tensor& t,
                                        c10d::ReduceOp::RedOpType rop, int root) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/true), "chorus: ", name,
              ": bitwise ops take integer or bool tensors, got ", t.scalar_type());
  at::Tensor in = Dense(t);
  at::Tensor all = at::empty({size_, in.numel()}, in.options());
  const Elements e = MovedAs(in);
  chorus::Work w = comm_.AllGather(Ptr(in), Ptr(all), e.count, e.dtype, c.chorus_stream);
  if (root < 0 || root == rank_) {  // on the stream, after the gather
    at::Tensor acc = all[0].clone();
    for (int64_t r = 1; r < size_; ++r) {
      if (rop == c10d::ReduceOp::BAND) acc.bitwise_and_(all[r]);
      if (rop == c10d::ReduceOp::BOR) acc.bitwise_or_(all[r]);
      if (rop == c10d::ReduceOp::BXOR) acc.bitwise_xor_(all[r]);
    }
    t.copy_(acc.view(t.sizes()));
  }
  return Finish(c, op, OpName(name, t), {w}, {t}, {t, in, all});
}

CudaOps::WorkPtr CudaOps::AllGather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(inputs.size() == 1, "chorus: all_gather takes one tensor per process, got ", inputs.size());
  TORCH_CHECK(outputs.size() == 1, "chorus: all_gather takes one output list per process, got ", outputs.size());
  std::vector<at::Tensor> all = outputs[0];
  all.push_back(inputs[0]);
  Call c = Begin("all_gather", all);
  at::Tensor in = Dense(inputs[0]);
  CheckCount(outputs[0], size_, "all_gather", "output");
  CheckCudaLike(outputs[0], in, "all_gather", "output");
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  const Elements e = MovedAs(in);
  chorus::Work w = comm_.AllGather(Ptr(in), Ptr(flat), e.count, e.dtype, c.chorus_stream);
  Unpack(flat, outputs[0]);
  all.push_back(in);
  all.push_back(flat);
  return Finish(c, c10d::OpType::ALLGATHER, OpName("all_gather", in), {w}, outputs[0], std::move(all));
}

CudaOps::WorkPtr CudaOps::AllGatherBase(at::Tensor& output, at::Tensor& input) {
  Call c = Begin("_allgather_base", {output, input});
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _allgather_base: output is ", output.scalar_type(),
              ", input ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "chorus: _allgather_base: output has ", output.numel(),
              " elements, needs ", input.numel() * size_, " (input ", input.numel(), " x ", size_, " ranks)");
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  const Elements e = MovedAs(in);
  chorus::Work w = comm_.AllGather(Ptr(in), Ptr(out), e.count, e.dtype, c.chorus_stream);
  if (!out.is_same(output)) output.copy_(out);
  return Finish(c, c10d::OpType::_ALLGATHER_BASE, OpName("_allgather_base", in), {w}, {output},
                {output, input, in, out});
}

CudaOps::WorkPtr CudaOps::AllGatherCoalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(!inputs.empty(), "chorus: all_gather_coalesced needs at least one tensor");
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_), "chorus: all_gather_coalesced needs ", size_,
              " output lists (one per rank), got ", outputs.size());
  std::vector<at::Tensor> all = Flat(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  Call c = Begin("all_gather_coalesced", all);
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "chorus: all_gather_coalesced: inputs must all be ",
                inputs[0].scalar_type(), ", got ", t.scalar_type());
  }
  for (const std::vector<at::Tensor>& list : outputs) {
    CheckCount(list, inputs.size(), "all_gather_coalesced", "output");
    for (size_t i = 0; i < list.size(); ++i) CheckCudaLike({list[i]}, inputs[i], "all_gather_coalesced", "output");
  }
  at::Tensor flat_in = Packed(inputs);
  at::Tensor flat_out = at::empty({size_ * flat_in.numel()}, flat_in.options());
  const Elements e = MovedAs(flat_in);
  chorus::Work w = comm_.AllGather(Ptr(flat_in), Ptr(flat_out), e.count, e.dtype, c.chorus_stream);
  for (size_t r = 0; r < outputs.size(); ++r) Unpack(flat_out, outputs[r], static_cast<int64_t>(r) * flat_in.numel());
  std::vector<at::Tensor> outs = Flat(outputs);
  all.push_back(flat_in);
  all.push_back(flat_out);
  return Finish(c, c10d::OpType::ALLGATHER_COALESCED, OpName("all_gather_coalesced", flat_in), {w}, outs,
                std::move(all));
}

CudaOps::WorkPtr CudaOps::Gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                 const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "chorus: gather takes one tensor per process, got ", inputs.size());
  CheckRoot(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> all = Flat(outputs);
  all.push_back(inputs[0]);
  Call c = Begin("gather", all);
  at::Tensor in = Dense(inputs[0]);
  const Elements e = MovedAs(in);
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "chorus: gather on the root takes one output list, got ", outputs.size());
    CheckCount(outputs[0], size_, "gather", "output");
    CheckCudaLike(outputs[0], in, "gather", "output");
    flat = at::empty({size_ * in.numel()}, in.options());
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "chorus: gather: only the root (rank ",
                root, ") takes output tensors");
  }
  chorus::Work w = comm_.Gather(Ptr(in), flat.defined() ? Ptr(flat) : nullptr, e.count, e.dtype, root, c.chorus_stream);
  if (flat.defined()) Unpack(flat, outs);
  all.push_back(in);
  all.push_back(flat);
  return Finish(c, c10d::OpType::GATHER, OpName("gather", in), {w}, outs, std::move(all));
}

CudaOps::WorkPtr CudaOps::Scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                  const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "chorus: scatter takes one tensor per process, got ", outputs.size());
  CheckRoot(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> all = Flat(inputs);
  all.push_back(outputs[0]);
  Call c = Begin("scatter", all);
  at::Tensor& t = outputs[0];
  at::Tensor out = Dense(t);
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "chorus: scatter on the root takes one input list, got ", inputs.size());
    CheckCount(inputs[0], size_, "scatter", "input");
    CheckCudaLike(inputs[0], out, "scatter", "input");
    flat = Packed(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "chorus: scatter: only the root (rank ",
                root, ") takes input tensors");
  }
  const Elements e = MovedAs(out);
  chorus::Work w =
      comm_.Scatter(flat.defined() ? Ptr(flat) : nullptr, Ptr(out), e.count, e.dtype, root, c.chorus_stream);
  if (!out.is_same(t)) t.copy_(out);
  all.push_back(out);
  all.push_back(flat);
  return Finish(c, c10d::OpType::SCATTER, OpName("scatter", t), {w}, outputs, std::move(all));
}

CudaOps::WorkPtr CudaOps::ReduceScatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                        const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "chorus: reduce_scatter takes one tensor per process, got ", outputs.size());
  TORCH_CHECK(inputs.size() == 1, "chorus: reduce_scatter takes one input list per process, got ", inputs.size());
  std::vector<at::Tensor> all = inputs[0];
  all.push_back(outputs[0]);
  Call c = Begin("reduce_scatter", all);
  at::Tensor& t = outputs[0];
  CheckCount(inputs[0], size_, "reduce_scatter", "input");
  CheckCudaLike(inputs[0], t, "reduce_scatter", "input");
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: reduce_scatter does not support bitwise ops");
  const Reduction r = ReducedAs(t, opts.reduceOp, "reduce_scatter");
  at::Tensor flat = Packed(inputs[0]);
  at::Tensor out = Dense(t);
  chorus::Work w = comm_.ReduceScatter(Ptr(flat), Ptr(out), out.numel(), r.dtype, r.op, c.chorus_stream);
  if (!out.is_same(t)) t.copy_(out);
  all.push_back(flat);
  all.push_back(out);
  return Finish(c, c10d::OpType::REDUCE_SCATTER, OpName("reduce_scatter", t), {w}, outputs, std::move(all));
}

CudaOps::WorkPtr CudaOps::ReduceScatterBase(at::Tensor& output, at::Tensor& input,
                                            const c10d::ReduceScatterOptions& opts) {
  Call c = Begin("_reduce_scatter_base", {output, input});
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _reduce_scatter_base: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "chorus: _reduce_scatter_base: input has ", input.numel(),
              " elements, needs ", output.numel() * size_, " (output ", output.numel(), " x ", size_, " ranks)");
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: _reduce_scatter_base does not support bitwise ops");
  const Reduction r = ReducedAs(output, opts.reduceOp, "_reduce_scatter_base");
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  chorus::Work w = comm_.ReduceScatter(Ptr(in), Ptr(out), out.numel(), r.dtype, r.op, c.chorus_stream);
  if (!out.is_same(output)) output.copy_(out);
  return Finish(c, c10d::OpType::_REDUCE_SCATTER_BASE, OpName("_reduce_scatter_base", output), {w}, {output},
                {output, input, in, out});
}

std::vector<chorus::Work> CudaOps::AllToAllV(const Call& c, const std::vector<const char*>& send,
                                             const std::vector<size_t>& send_bytes, const std::vector<char*>& recv,
                                             const std::vector<size_t>& recv_bytes) {
  TORCH_CHECK(send_bytes[rank_] == recv_bytes[rank_], "chorus: all_to_all: rank ", rank_, " sends itself ",
              send_bytes[rank_], " bytes but expects ", recv_bytes[rank_]);
  if (send_bytes[rank_] > 0) {
    C10_CUDA_CHECK(
        cudaMemcpyAsync(recv[rank_], send[rank_], send_bytes[rank_], cudaMemcpyDeviceToDevice, c.stream.stream()));
  }
  // Every rank calls all_to_all in the same order, so the counter names the same call.
  const uint32_t tag = internal_tag_bit_ | (seq_.fetch_add(1) & ~internal_tag_bit_);
  std::vector<chorus::Work> works;
  // Stream-form sends and receives run in call order: with each pair, the lower rank
  // sends first and the higher receives first, so no two ranks wait on each other.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (rank_ < p) {
      works.push_back(comm_.Send(send[p], send_bytes[p], p, c.chorus_stream, tag));
      works.push_back(comm_.Recv(recv[p], recv_bytes[p], p, c.chorus_stream, tag));
    } else {
      works.push_back(comm_.Recv(recv[p], recv_bytes[p], p, c.chorus_stream, tag));
      works.push_back(comm_.Send(send[p], send_bytes[p], p, c.chorus_stream, tag));
    }
  }
  return works;
}

CudaOps::WorkPtr CudaOps::AllToAllBase(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                                       std::vector<int64_t>& input_split_sizes) {
  Call c = Begin("all_to_all_single", {output, input});
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: all_to_all_single: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  const int n = size_;
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  std::vector<chorus::Work> works;
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "chorus: all_to_all_single: input (", in.numel(),
                " elements) and output (", out.numel(), ") must be equal and divisible by ", n, " ranks");
    const Elements e = MovedAs(in);
    works.push_back(comm_.AllToAll(Ptr(in), Ptr(out), e.count / n, e.dtype, c.chorus_stream));
  } else {
    const Splits in_split = SplitBytes(in, input_split_sizes, n, "input");
    const Splits out_split = SplitBytes(out, output_split_sizes, n, "output");
    std::vector<const char*> send(n);
    std::vector<char*> recv(n);
    for (int p = 0; p < n; ++p) {
      send[p] = static_cast<const char*>(in.data_ptr()) + in_split.offset[p];
      recv[p] = static_cast<char*>(out.data_ptr()) + out_split.offset[p];
    }
    works = AllToAllV(c, send, in_split.bytes, recv, out_split.bytes);
  }
  if (!out.is_same(output)) output.copy_(out);
  return Finish(c, c10d::OpType::ALLTOALL_BASE, OpName("all_to_all_single", in), std::move(works), {output},
                {output, input, in, out});
}

CudaOps::WorkPtr CudaOps::AllToAll(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs) {
  const int n = size_;
  CheckCount(inputs, n, "all_to_all", "input");
  CheckCount(outputs, n, "all_to_all", "output");
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  Call c = Begin("all_to_all", all);
  std::vector<at::Tensor> ins, outs;
  std::vector<const char*> send(n);
  std::vector<char*> recv(n);
  std::vector<size_t> send_bytes(n), recv_bytes(n);
  for (int p = 0; p < n; ++p) {
    TORCH_CHECK(inputs[p].scalar_type() == outputs[p].scalar_type(), "chorus: all_to_all: input ", p, " is ",
                inputs[p].scalar_type(), ", output ", p, " is ", outputs[p].scalar_type());
    ins.push_back(Dense(inputs[p]));
    outs.push_back(Dense(outputs[p]));
    send[p] = static_cast<const char*>(ins[p].data_ptr());
    recv[p] = static_cast<char*>(outs[p].data_ptr());
    send_bytes[p] = ins[p].nbytes();
    recv_bytes[p] = outs[p].nbytes();
  }
  std::vector<chorus::Work> works = AllToAllV(c, send, send_bytes, recv, recv_bytes);
  for (int p = 0; p < n; ++p) {
    if (!outs[p].is_same(outputs[p])) outputs[p].copy_(outs[p]);
  }
  all.insert(all.end(), ins.begin(), ins.end());
  all.insert(all.end(), outs.begin(), outs.end());
  return Finish(c, c10d::OpType::ALLTOALL, OpName("all_to_all", ins[0]), std::move(works), outputs, std::move(all));
}

CudaOps::WorkPtr CudaOps::Send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  TORCH_CHECK(tensors.size() == 1, "chorus: send takes one tensor per process, got ", tensors.size());
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, "chorus: send: destination ", dst,
              " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  TORCH_CHECK(tag >= 0, "chorus: send: tag ", tag, " is negative");
  Call c = Begin("send", tensors);
  at::Tensor buf = Dense(tensors[0]);
  chorus::Work w = comm_.Send(Ptr(buf), buf.nbytes(), dst, c.chorus_stream, static_cast<uint32_t>(tag));
  return Finish(c, c10d::OpType::SEND, OpName("send", buf) + " to rank " + std::to_string(dst), {w}, tensors,
                {tensors[0], buf});
}

CudaOps::WorkPtr CudaOps::Recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  TORCH_CHECK(tensors.size() == 1, "chorus: recv takes one tensor per process, got ", tensors.size());
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, "chorus: recv: source ", src,
              " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  TORCH_CHECK(tag >= 0, "chorus: recv: tag ", tag, " is negative");
  Call c = Begin("recv", tensors);
  at::Tensor& t = tensors[0];
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_.Recv(Ptr(buf), buf.nbytes(), src, c.chorus_stream, static_cast<uint32_t>(tag));
  if (!buf.is_same(t)) t.copy_(buf);
  return Finish(c, c10d::OpType::RECV, OpName("recv", buf) + " from rank " + std::to_string(src), {w}, tensors,
                {t, buf});
}

CudaOps::WorkPtr CudaOps::Barrier(const c10d::BarrierOptions& opts) {
  int device = device_.load();
  if (!opts.device_ids.empty()) device = static_cast<int>(opts.device_ids[0]);
  if (device < 0) return {};
  // A one-byte tensor names the device for Begin (and its checks).
  at::Tensor probe = at::empty(
      {1}, at::TensorOptions().dtype(at::kByte).device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device))));
  Call c = Begin("barrier", {probe});
  chorus::Work w = comm_.Barrier(c.chorus_stream);
  return Finish(c, c10d::OpType::BARRIER, "barrier", {w}, {}, {}, /*host_wait=*/true);
}

}  // namespace torch_chorus
