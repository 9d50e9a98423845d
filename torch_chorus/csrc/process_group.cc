#include "torch_chorus/csrc/process_group.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "torch_chorus/csrc/tensor_args.h"
#ifdef TORCH_CHORUS_CUDA
#include "torch_chorus/csrc/cuda_ops.h"
#endif
#include "torch_chorus/csrc/torch_store.h"

// An op whose tensors are on a CUDA device goes to cuda_ops (in builds with CUDA).
#ifdef TORCH_CHORUS_CUDA
#define TORCH_CHORUS_ON_CUDA(any_cuda, call) \
  if (any_cuda) return cuda_->call
#else
#define TORCH_CHORUS_ON_CUDA(any_cuda, call)
#endif

namespace torch_chorus {

// Holds every op until it is settled, so that its tensors live until chorus is done
// with them (a caller may drop its Work), and settles, on a thread of its own, the ops
// whose futures were asked for (DDP's), in the order they were made. An op nobody
// waits on is settled when it reaches the front of the held ones.
class FutureMarker {
 public:
  explicit FutureMarker(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  ~FutureMarker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    for (auto& work : held_) work->Settle(timeout_, /*give_up=*/true);
  }

  void Hold(c10::intrusive_ptr<ChorusWork> work) {
    std::vector<c10::intrusive_ptr<ChorusWork>> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!held_.empty() && held_.front()->Done()) {
        done.push_back(std::move(held_.front()));
        held_.pop_front();
      }
      held_.push_back(std::move(work));
    }
    // Outside the lock: settling runs future callbacks, which may start ops.
    for (auto& w : done) w->Settle(std::chrono::milliseconds(0), /*give_up=*/false);
  }

  // `work` gets its future marked without anyone calling wait().
  void Watch(c10::intrusive_ptr<ChorusWork> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      watched_.push_back(std::move(work));
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      c10::intrusive_ptr<ChorusWork> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !watched_.empty(); });
        if (watched_.empty()) return;  // stopping, nothing left
        work = std::move(watched_.front());
        watched_.pop_front();
      }
      // chorus bounds every op by the timeout; past it (and a margin) the op is failed.
      work->Settle(timeout_ + std::chrono::seconds(5), /*give_up=*/true);
    }
  }

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ChorusWork>> held_;
  std::deque<c10::intrusive_ptr<ChorusWork>> watched_;
  bool stop_ = false;
  std::thread thread_;
};

namespace {

// Internal point-to-point tags (all_to_all with split sizes) have bit 31 set; torch's
// tags are below it.
constexpr uint32_t kInternalTagBit = 1u << 31;

void CheckTensor(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.layout() == c10::kStrided, "chorus: ", name, " does not support ", t.layout(),
              " tensors (dense tensors only)");
  TORCH_CHECK(t.device().is_cpu(), "chorus: ", name, " takes CPU tensors in this build of torch_chorus, got one on ",
              t.device());
}

void CheckOne(const std::vector<at::Tensor>& ts, const char* name) {
  TORCH_CHECK(ts.size() == 1, "chorus: ", name, " takes one tensor per process, got ", ts.size());
  CheckTensor(ts[0], name);
}

// All like `first` (dtype and number of elements), for list arguments.
void CheckLike(const std::vector<at::Tensor>& ts, const at::Tensor& first, const char* name, const char* which) {
  for (const at::Tensor& t : ts) {
    CheckTensor(t, name);
    TORCH_CHECK(t.scalar_type() == first.scalar_type(), "chorus: ", name, ": ", which, " tensors must all be ",
                first.scalar_type(), ", got ", t.scalar_type());
    TORCH_CHECK(t.numel() == first.numel(), "chorus: ", name, ": ", which, " tensors must all have ", first.numel(),
                " elements, got ", t.numel());
  }
}

// CopyBack writes a staging tensor's result into the caller's tensor.
std::function<void()> CopyBack(at::Tensor dst, at::Tensor src) {
  if (dst.is_same(src)) return nullptr;
  return [dst, src]() mutable { dst.copy_(src); };
}

}  // namespace

// ---- ChorusWork -------------------------------------------------------------

ChorusWork::ChorusWork(int rank, c10d::OpType op, std::string what, std::vector<chorus::Work> works,
                       std::vector<at::Tensor> outputs, std::vector<at::Tensor> buffers, std::function<void()> finish,
                       std::chrono::milliseconds timeout, std::weak_ptr<FutureMarker> marker)
    : c10d::Work(rank, op),
      what_(std::move(what)),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      buffers_(std::move(buffers)),
      finish_(std::move(finish)),
      timeout_(timeout),
      marker_(std::move(marker)) {}

bool ChorusWork::Settle(std::chrono::milliseconds timeout, bool give_up) {
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (settled_) return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  chorus::Status failed;
  for (chorus::Work& w : works_) {
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                 std::chrono::milliseconds(0));
    chorus::Status st = w.Wait(left);
    if (st.code() == chorus::StatusCode::kTimeout && !w.Test()) {
      if (!give_up) return false;
      failed = st;
      break;
    }
    if (!st.ok() && failed.ok()) failed = st;
  }
  std::lock_guard<std::mutex> settle(settle_mu_);
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (settled_) return true;
  }
  std::exception_ptr error;
  if (!failed.ok()) {
    error = std::make_exception_ptr(std::runtime_error("chorus: " + what_ + " failed: " + failed.ToString()));
  } else if (finish_) {
    try {
      finish_();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(std::runtime_error("chorus: " + what_ + ": " + e.what()));
    }
  }
  finish_ = nullptr;
  buffers_.clear();
  finish(error);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    settled_ = true;
    future = future_;
  }
  if (future) {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }
  return true;
}

bool ChorusWork::Done() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  for (chorus::Work& w : works_) {
    if (!w.Test()) return false;
  }
  return true;
}

bool ChorusWork::isCompleted() { return Done() && Settle(std::chrono::milliseconds(0), /*give_up=*/false); }

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
  if (!Settle(limit, /*give_up=*/false)) {
    throw std::runtime_error("chorus: " + what_ + " did not complete within " + std::to_string(limit.count()) + " ms");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  bool settled = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future = future_;
    settled = settled_;
  }
  if (!settled) {
    if (std::shared_ptr<FutureMarker> marker = marker_.lock()) {
      marker->Watch(c10::intrusive_ptr<ChorusWork>::reclaim_copy(this));
    }
  } else {  // Settle ran before the future existed: mark it here, once.
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) {
      future->setError(exception_);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }
  return future;
}

// ---- ProcessGroupChorus -----------------------------------------------------

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : BackendBase(rank, size), timeout_(timeout) {
  const chorus::Status& env = chorus::Config::ProcessConfigStatus();
  TORCH_CHECK(env.ok(), "chorus: ", env.ToString());
  chorus::Options options;
  options.rank = rank;
  options.world_size = size;
  options.store = std::make_shared<TorchStore>(store);
  chorus::Config config = chorus::Config::Process();
  // torch's timeout bounds set-up and every op, as with Gloo.
  config.timeout_ms = timeout.count();
  config.connect_timeout_ms = std::min<int64_t>(config.connect_timeout_ms, timeout.count());
  options.config = config;
  chorus::Result<std::unique_ptr<chorus::Communicator>> comm = chorus::Communicator::Create(options);
  TORCH_CHECK(comm.ok(), "chorus: creating the process group on rank ", rank, " of ", size,
              " failed: ", comm.status().ToString());
  comm_ = std::move(comm.value());
  marker_ = std::make_shared<FutureMarker>(timeout_);
#ifdef TORCH_CHORUS_CUDA
  cuda_ = std::make_unique<CudaOps>(*comm_, rank, size, timeout_, alltoallv_seq_, kInternalTagBit);
#endif
}

ProcessGroupChorus::~ProcessGroupChorus() {
  // Queued collectives finish (or fail) first; then the marker settles what is left.
  chorus::Status st = comm_->Shutdown();
  if (!st.ok()) TORCH_WARN("chorus: shutting down rank ", getRank(), " of ", getSize(), ": ", st.ToString());
  marker_.reset();
}

std::string ProcessGroupChorus::Describe() const { return comm_->Describe(); }

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::MakeWork(c10d::OpType op, std::string what,
                                                            std::vector<chorus::Work> works,
                                                            std::vector<at::Tensor> outputs,
                                                            std::vector<at::Tensor> buffers,
                                                            std::function<void()> finish) {
  auto work = c10::make_intrusive<ChorusWork>(getRank(), op, std::move(what), std::move(works), std::move(outputs),
                                              std::move(buffers), std::move(finish), timeout_, marker_);
  marker_->Hold(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), Broadcast(tensors, opts));
  CheckOne(tensors, "broadcast");
  CheckRoot(opts.rootRank, getSize(), "broadcast");
  at::Tensor& t = tensors[0];
  at::Tensor buf = Dense(t);
  const Elements e = MovedAs(buf);
  chorus::Work w = comm_->IBroadcast(Ptr(buf), e.count, e.dtype, static_cast<int>(opts.rootRank));
  return MakeWork(c10d::OpType::BROADCAST, OpName("broadcast", t), {w}, tensors, {buf}, CopyBack(t, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), AllReduce(tensors, opts));
  CheckOne(tensors, "all_reduce");
  at::Tensor& t = tensors[0];
  if (IsBitwise(opts.reduceOp)) return BitwiseReduce(c10d::OpType::ALLREDUCE, "all_reduce", t, opts.reduceOp, -1);
  const Reduction r = ReducedAs(t, opts.reduceOp, "all_reduce");
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_->IAllReduce(Ptr(buf), Ptr(buf), buf.numel(), r.dtype, r.op);
  return MakeWork(c10d::OpType::ALLREDUCE, OpName("all_reduce", t), {w}, tensors, {buf}, CopyBack(t, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), AllReduceCoalesced(tensors, opts));
  TORCH_CHECK(!tensors.empty(), "chorus: all_reduce_coalesced needs at least one tensor");
  for (const at::Tensor& t : tensors) {
    CheckTensor(t, "all_reduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "chorus: all_reduce_coalesced: tensors must all be ",
                tensors[0].scalar_type(), ", got ", t.scalar_type());
  }
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: all_reduce_coalesced does not support bitwise ops");
  const Reduction r = ReducedAs(tensors[0], opts.reduceOp, "all_reduce_coalesced");
  at::Tensor flat = Packed(tensors);
  chorus::Work w = comm_->IAllReduce(Ptr(flat), Ptr(flat), flat.numel(), r.dtype, r.op);
  std::vector<at::Tensor> outs = tensors;
  return MakeWork(c10d::OpType::ALLREDUCE_COALESCED, OpName("all_reduce_coalesced", flat), {w}, tensors, {flat},
                  [flat, outs]() mutable { Unpack(flat, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), Reduce(tensors, opts));
  CheckOne(tensors, "reduce");
  CheckRoot(opts.rootRank, getSize(), "reduce");
  at::Tensor& t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  if (IsBitwise(opts.reduceOp)) return BitwiseReduce(c10d::OpType::REDUCE, "reduce", t, opts.reduceOp, root);
  const Reduction r = ReducedAs(t, opts.reduceOp, "reduce");
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_->IReduce(Ptr(buf), Ptr(buf), buf.numel(), r.dtype, r.op, root);
  return MakeWork(c10d::OpType::REDUCE, OpName("reduce", t), {w}, tensors, {buf},
                  getRank() == root ? CopyBack(t, buf) : nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::BitwiseReduce(c10d::OpType op, const char* name, at::Tensor& t,
                                                                 RedOp rop, int root) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/true), "chorus: ", name,
              ": bitwise ops take integer or bool tensors, got ", t.scalar_type());
  at::Tensor in = Dense(t);
  at::Tensor all = at::empty({getSize(), in.numel()}, in.options());
  const Elements e = MovedAs(in);
  chorus::Work w = comm_->IAllGather(Ptr(in), Ptr(all), e.count, e.dtype);
  std::function<void()> finish;
  if (root < 0 || root == getRank()) {
    finish = [t, all, rop]() mutable {
      at::Tensor acc = all[0].clone();
      for (int64_t r = 1; r < all.size(0); ++r) {
        if (rop == c10d::ReduceOp::BAND) acc.bitwise_and_(all[r]);
        if (rop == c10d::ReduceOp::BOR) acc.bitwise_or_(all[r]);
        if (rop == c10d::ReduceOp::BXOR) acc.bitwise_xor_(all[r]);
      }
      t.copy_(acc.view(t.sizes()));
    };
  }
  return MakeWork(op, OpName(name, t), {w}, {t}, {in, all}, std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions&) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), AllGather(outputs, inputs));
  CheckOne(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1, "chorus: all_gather takes one output list per process, got ", outputs.size());
  at::Tensor in = Dense(inputs[0]);
  CheckCount(outputs[0], getSize(), "all_gather", "output");
  CheckLike(outputs[0], in, "all_gather", "output");
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  const Elements e = MovedAs(in);
  chorus::Work w = comm_->IAllGather(Ptr(in), Ptr(flat), e.count, e.dtype);
  std::vector<at::Tensor> outs = outputs[0];
  return MakeWork(c10d::OpType::ALLGATHER, OpName("all_gather", in), {w}, outs, {in, flat},
                  [flat, outs]() mutable { Unpack(flat, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(output, input), AllGatherBase(output, input));
  CheckTensor(input, "_allgather_base");
  CheckTensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _allgather_base: output is ", output.scalar_type(),
              ", input ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "chorus: _allgather_base: output has ", output.numel(),
              " elements, needs ", input.numel() * getSize(), " (input ", input.numel(), " x ", getSize(), " ranks)");
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  const Elements e = MovedAs(in);
  chorus::Work w = comm_->IAllGather(Ptr(in), Ptr(out), e.count, e.dtype);
  return MakeWork(c10d::OpType::_ALLGATHER_BASE, OpName("_allgather_base", in), {w}, {output}, {in, out},
                  CopyBack(output, out));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                       std::vector<at::Tensor>& inputs,
                                                                       const c10d::AllgatherOptions&) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), AllGatherCoalesced(outputs, inputs));
  TORCH_CHECK(!inputs.empty(), "chorus: all_gather_coalesced needs at least one tensor");
  TORCH_CHECK(outputs.size() == static_cast<size_t>(getSize()), "chorus: all_gather_coalesced needs ", getSize(),
              " output lists (one per rank), got ", outputs.size());
  for (const at::Tensor& t : inputs) {
    CheckTensor(t, "all_gather_coalesced");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "chorus: all_gather_coalesced: inputs must all be ",
                inputs[0].scalar_type(), ", got ", t.scalar_type());
  }
  for (const std::vector<at::Tensor>& list : outputs) {
    CheckCount(list, inputs.size(), "all_gather_coalesced", "output");
    for (size_t i = 0; i < list.size(); ++i) CheckLike({list[i]}, inputs[i], "all_gather_coalesced", "output");
  }
  at::Tensor flat_in = Packed(inputs);
  at::Tensor flat_out = at::empty({getSize() * flat_in.numel()}, flat_in.options());
  const Elements e = MovedAs(flat_in);
  chorus::Work w = comm_->IAllGather(Ptr(flat_in), Ptr(flat_out), e.count, e.dtype);
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> all;
  for (const auto& list : outs) all.insert(all.end(), list.begin(), list.end());
  return MakeWork(c10d::OpType::ALLGATHER_COALESCED, OpName("all_gather_coalesced", flat_in), {w}, all,
                  {flat_in, flat_out}, [flat_out, outs, n = flat_in.numel()]() mutable {
                    for (size_t r = 0; r < outs.size(); ++r) Unpack(flat_out, outs[r], static_cast<int64_t>(r) * n);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), Gather(outputs, inputs, opts));
  CheckOne(inputs, "gather");
  CheckRoot(opts.rootRank, getSize(), "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor in = Dense(inputs[0]);
  const Elements e = MovedAs(in);
  at::Tensor flat;
  std::function<void()> finish;
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1, "chorus: gather on the root takes one output list, got ", outputs.size());
    CheckCount(outputs[0], getSize(), "gather", "output");
    CheckLike(outputs[0], in, "gather", "output");
    flat = at::empty({getSize() * in.numel()}, in.options());
    outs = outputs[0];
    finish = [flat, outs]() mutable { Unpack(flat, outs); };
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "chorus: gather: only the root (rank ",
                root, ") takes output tensors");
  }
  chorus::Work w = comm_->IGather(Ptr(in), flat.defined() ? Ptr(flat) : nullptr, e.count, e.dtype, root);
  return MakeWork(c10d::OpType::GATHER, OpName("gather", in), {w}, outs, {in, flat}, std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), Scatter(outputs, inputs, opts));
  CheckOne(outputs, "scatter");
  CheckRoot(opts.rootRank, getSize(), "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor& t = outputs[0];
  at::Tensor out = Dense(t);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1, "chorus: scatter on the root takes one input list, got ", inputs.size());
    CheckCount(inputs[0], getSize(), "scatter", "input");
    CheckLike(inputs[0], out, "scatter", "input");
    flat = Packed(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "chorus: scatter: only the root (rank ",
                root, ") takes input tensors");
  }
  const Elements e = MovedAs(out);
  chorus::Work w = comm_->IScatter(flat.defined() ? Ptr(flat) : nullptr, Ptr(out), e.count, e.dtype, root);
  return MakeWork(c10d::OpType::SCATTER, OpName("scatter", t), {w}, outputs, {flat, out}, CopyBack(t, out));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), ReduceScatter(outputs, inputs, opts));
  CheckOne(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "chorus: reduce_scatter takes one input list per process, got ", inputs.size());
  at::Tensor& t = outputs[0];
  CheckCount(inputs[0], getSize(), "reduce_scatter", "input");
  CheckLike(inputs[0], t, "reduce_scatter", "input");
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: reduce_scatter does not support bitwise ops");
  const Reduction r = ReducedAs(t, opts.reduceOp, "reduce_scatter");
  at::Tensor flat = Packed(inputs[0]);
  at::Tensor out = Dense(t);
  chorus::Work w = comm_->IReduceScatter(Ptr(flat), Ptr(out), out.numel(), r.dtype, r.op);
  return MakeWork(c10d::OpType::REDUCE_SCATTER, OpName("reduce_scatter", t), {w}, outputs, {flat, out},
                  CopyBack(t, out));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(output, input), ReduceScatterBase(output, input, opts));
  CheckTensor(input, "_reduce_scatter_base");
  CheckTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _reduce_scatter_base: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "chorus: _reduce_scatter_base: input has ", input.numel(),
              " elements, needs ", output.numel() * getSize(), " (output ", output.numel(), " x ", getSize(),
              " ranks)");
  TORCH_CHECK(!IsBitwise(opts.reduceOp), "chorus: _reduce_scatter_base does not support bitwise ops");
  const Reduction r = ReducedAs(output, opts.reduceOp, "_reduce_scatter_base");
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  chorus::Work w = comm_->IReduceScatter(Ptr(in), Ptr(out), out.numel(), r.dtype, r.op);
  return MakeWork(c10d::OpType::_REDUCE_SCATTER_BASE, OpName("_reduce_scatter_base", output), {w}, {output}, {in, out},
                  CopyBack(output, out));
}

std::vector<chorus::Work> ProcessGroupChorus::AllToAllV(const std::vector<const void*>& send,
                                                        const std::vector<size_t>& send_bytes,
                                                        const std::vector<void*>& recv,
                                                        const std::vector<size_t>& recv_bytes) {
  const int me = getRank();
  TORCH_CHECK(send_bytes[me] == recv_bytes[me], "chorus: all_to_all: rank ", me, " sends itself ", send_bytes[me],
              " bytes but expects ", recv_bytes[me]);
  if (send_bytes[me] > 0) std::memcpy(recv[me], send[me], send_bytes[me]);
  // Every rank calls all_to_all in the same order, so the counter names the same call.
  const uint32_t tag = kInternalTagBit | (alltoallv_seq_.fetch_add(1) & ~kInternalTagBit);
  std::vector<chorus::Work> works;
  // Receives first: a large send completes only once its receive is posted.
  for (int p = 0; p < getSize(); ++p) {
    if (p != me) works.push_back(comm_->IRecv(recv[p], recv_bytes[p], p, tag));
  }
  for (int p = 0; p < getSize(); ++p) {
    if (p != me) works.push_back(comm_->ISend(send[p], send_bytes[p], p, tag));
  }
  return works;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& output_split_sizes,
                                                                 std::vector<int64_t>& input_split_sizes,
                                                                 const c10d::AllToAllOptions&) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(output, input), AllToAllBase(output, input, output_split_sizes, input_split_sizes));
  CheckTensor(input, "all_to_all_single");
  CheckTensor(output, "all_to_all_single");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: all_to_all_single: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  const int n = getSize();
  at::Tensor in = Dense(input);
  at::Tensor out = Dense(output);
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "chorus: all_to_all_single: input (", in.numel(),
                " elements) and output (", out.numel(), ") must be equal and divisible by ", n, " ranks");
    const Elements e = MovedAs(in);
    chorus::Work w = comm_->IAllToAll(Ptr(in), Ptr(out), e.count / n, e.dtype);
    return MakeWork(c10d::OpType::ALLTOALL_BASE, OpName("all_to_all_single", in), {w}, {output}, {in, out},
                    CopyBack(output, out));
  }
  const Splits in_split = SplitBytes(in, input_split_sizes, n, "input");
  const Splits out_split = SplitBytes(out, output_split_sizes, n, "output");
  std::vector<const void*> send(n);
  std::vector<void*> recv(n);
  for (int p = 0; p < n; ++p) {
    send[p] = static_cast<const char*>(in.data_ptr()) + in_split.offset[p];
    recv[p] = static_cast<char*>(out.data_ptr()) + out_split.offset[p];
  }
  std::vector<chorus::Work> works = AllToAllV(send, in_split.bytes, recv, out_split.bytes);
  return MakeWork(c10d::OpType::ALLTOALL_BASE, OpName("all_to_all_single", in), std::move(works), {output}, {in, out},
                  CopyBack(output, out));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHORUS_ON_CUDA(AnyCudaOf(outputs, inputs), AllToAll(outputs, inputs));
  const int n = getSize();
  CheckCount(inputs, n, "all_to_all", "input");
  CheckCount(outputs, n, "all_to_all", "output");
  std::vector<at::Tensor> ins, outs;
  std::vector<const void*> send(n);
  std::vector<void*> recv(n);
  std::vector<size_t> send_bytes(n), recv_bytes(n);
  std::vector<std::function<void()>> copy_back;
  for (int p = 0; p < n; ++p) {
    CheckTensor(inputs[p], "all_to_all");
    CheckTensor(outputs[p], "all_to_all");
    TORCH_CHECK(inputs[p].scalar_type() == outputs[p].scalar_type(), "chorus: all_to_all: input ", p, " is ",
                inputs[p].scalar_type(), ", output ", p, " is ", outputs[p].scalar_type());
    ins.push_back(Dense(inputs[p]));
    outs.push_back(Dense(outputs[p]));
    send[p] = ins[p].data_ptr();
    recv[p] = outs[p].data_ptr();
    send_bytes[p] = ins[p].nbytes();
    recv_bytes[p] = outs[p].nbytes();
    if (std::function<void()> c = CopyBack(outputs[p], outs[p])) copy_back.push_back(std::move(c));
  }
  std::vector<chorus::Work> works = AllToAllV(send, send_bytes, recv, recv_bytes);
  std::vector<at::Tensor> keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return MakeWork(c10d::OpType::ALLTOALL, OpName("all_to_all", ins[0]), std::move(works), outputs, std::move(keep),
                  [copy_back]() {
                    for (const auto& c : copy_back) c();
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
#ifdef TORCH_CHORUS_CUDA
  // On the group's CUDA device, where it has one (as ProcessGroupNCCL's).
  if (c10::intrusive_ptr<c10d::Work> w = cuda_->Barrier(opts)) return w;
#else
  (void)opts;
#endif
  return MakeWork(c10d::OpType::BARRIER, "barrier", {comm_->IBarrier()}, {}, {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), Send(tensors, dst, tag));
  CheckOne(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < getSize() && dst != getRank(), "chorus: send: destination ", dst,
              " is not another rank of this group (rank ", getRank(), " of ", getSize(), ")");
  TORCH_CHECK(tag >= 0, "chorus: send: tag ", tag, " is negative");
  at::Tensor buf = Dense(tensors[0]);
  chorus::Work w = comm_->ISend(Ptr(buf), buf.nbytes(), dst, static_cast<uint32_t>(tag));
  return MakeWork(c10d::OpType::SEND, OpName("send", buf) + " to rank " + std::to_string(dst), {w}, tensors, {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  TORCH_CHORUS_ON_CUDA(AnyCuda(tensors), Recv(tensors, src, tag));
  CheckOne(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < getSize() && src != getRank(), "chorus: recv: source ", src,
              " is not another rank of this group (rank ", getRank(), " of ", getSize(), ")");
  TORCH_CHECK(tag >= 0, "chorus: recv: tag ", tag, " is negative");
  at::Tensor& t = tensors[0];
  at::Tensor buf = Dense(t);
  chorus::Work w = comm_->IRecv(Ptr(buf), buf.nbytes(), src, static_cast<uint32_t>(tag));
  return MakeWork(c10d::OpType::RECV, OpName("recv", buf) + " from rank " + std::to_string(src), {w}, tensors, {buf},
                  CopyBack(t, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "chorus: recv from any source (dist.recv without src) is not supported: name the source rank");
}

}  // namespace torch_chorus
