#include "chorus/communicator.h"

#include "algos/barrier.h"
#include "algos/fingerprint.h"
#include "chorus/comm_impl.h"
#include "common/log.h"

namespace chorus {

Work Work::Failed(Status status) {
  class FailedState : public internal::WorkState {
   public:
    explicit FailedState(Status s) : status_(std::move(s)) {}
    bool Test() override { return true; }
    Status Wait(std::chrono::milliseconds) override { return status_; }
    std::chrono::milliseconds default_timeout() const override { return std::chrono::milliseconds(0); }

   private:
    Status status_;
  };
  return Work(std::make_shared<FailedState>(std::move(status)));
}

Result<std::unique_ptr<Communicator>> Communicator::Create(const Options& options) {
  Result<std::unique_ptr<internal::CommunicatorImpl>> impl = internal::CommunicatorImpl::Create(options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl.value())));
}

Communicator::Communicator(std::unique_ptr<internal::CommunicatorImpl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_ != nullptr) {
    Status st = impl_->Shutdown();
    if (!st.ok()) CHORUS_WARN("communicator shutdown: " << st.ToString());
  }
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::local_rank() const { return impl_->local_rank(); }
int Communicator::local_size() const { return impl_->local_size(); }
std::string Communicator::Describe() const { return impl_->Describe(); }
TrafficCounters Communicator::Counters() const { return impl_->Counters(); }
Result<std::string> Communicator::Explain(const std::string& collective, size_t count, DataType dtype) const {
  return impl_->Explain(collective, count, dtype);
}

Status Communicator::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->RunP2P(/*is_send=*/true, const_cast<void*>(buf), bytes, peer, tag);
}

Status Communicator::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->RunP2P(/*is_send=*/false, buf, bytes, peer, tag);
}

Work Communicator::Send(const void* buf, size_t bytes, int peer, CudaStream stream, uint32_t tag) {
  return impl_->EnqueueP2P(/*is_send=*/true, const_cast<void*>(buf), bytes, peer, tag, stream.handle);
}

Work Communicator::Recv(void* buf, size_t bytes, int peer, CudaStream stream, uint32_t tag) {
  return impl_->EnqueueP2P(/*is_send=*/false, buf, bytes, peer, tag, stream.handle);
}

Work Communicator::ISend(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->PostP2P(/*is_send=*/true, const_cast<void*>(buf), bytes, peer, tag);
}

Work Communicator::IRecv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->PostP2P(/*is_send=*/false, buf, bytes, peer, tag);
}

namespace {

using algos::Collective;
using internal::CollectiveCall;

CollectiveCall Call(Collective kind, const void* send, void* recv, size_t count, DataType dtype,
                    ReduceOp op = ReduceOp::kSum, int root = 0) {
  CollectiveCall c;
  c.kind = kind;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  return c;
}

}  // namespace

Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl_->Run(Call(Collective::kAllReduce, send, recv, count, dtype, op));
}
Status Communicator::Broadcast(void* buf, size_t count, DataType dtype, int root) {
  return Broadcast(buf, buf, count, dtype, root);
}

Status Communicator::Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Run(
      Call(Collective::kBroadcast, rank() == root ? send : recv, recv, count, dtype, ReduceOp::kSum, root));
}
Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  return impl_->Run(Call(Collective::kReduce, send, recv, count, dtype, op, root));
}
Status Communicator::AllGather(const void* send, void* recv, size_t count, DataType dtype) {
  return impl_->Run(Call(Collective::kAllGather, send, recv, count, dtype));
}
Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl_->Run(Call(Collective::kReduceScatter, send, recv, count, dtype, op));
}
Status Communicator::Gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Run(Call(Collective::kGather, send, recv, count, dtype, ReduceOp::kSum, root));
}
Status Communicator::Scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Run(Call(Collective::kScatter, send, recv, count, dtype, ReduceOp::kSum, root));
}
Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType dtype) {
  return impl_->Run(Call(Collective::kAllToAll, send, recv, count, dtype));
}
Status Communicator::Barrier() { return impl_->Run(Call(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8)); }

Work Communicator::AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                             CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kAllReduce, send, recv, count, dtype, op), stream.handle);
}
Work Communicator::Broadcast(void* buf, size_t count, DataType dtype, int root, CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, root), stream.handle);
}
Work Communicator::Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                          CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kReduce, send, recv, count, dtype, op, root), stream.handle);
}
Work Communicator::AllGather(const void* send, void* recv, size_t count, DataType dtype, CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kAllGather, send, recv, count, dtype), stream.handle);
}
Work Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                 CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kReduceScatter, send, recv, count, dtype, op), stream.handle);
}
Work Communicator::Gather(const void* send, void* recv, size_t count, DataType dtype, int root, CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kGather, send, recv, count, dtype, ReduceOp::kSum, root), stream.handle);
}
Work Communicator::Scatter(const void* send, void* recv, size_t count, DataType dtype, int root, CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kScatter, send, recv, count, dtype, ReduceOp::kSum, root), stream.handle);
}
Work Communicator::AllToAll(const void* send, void* recv, size_t count, DataType dtype, CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kAllToAll, send, recv, count, dtype), stream.handle);
}
Work Communicator::Barrier(CudaStream stream) {
  return impl_->Enqueue(Call(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8), stream.handle);
}

Work Communicator::IAllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl_->Post(Call(Collective::kAllReduce, send, recv, count, dtype, op));
}
Work Communicator::IBroadcast(void* buf, size_t count, DataType dtype, int root) {
  return IBroadcast(buf, buf, count, dtype, root);
}

Work Communicator::IBroadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Post(
      Call(Collective::kBroadcast, rank() == root ? send : recv, recv, count, dtype, ReduceOp::kSum, root));
}
Work Communicator::IReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  return impl_->Post(Call(Collective::kReduce, send, recv, count, dtype, op, root));
}
Work Communicator::IAllGather(const void* send, void* recv, size_t count, DataType dtype) {
  return impl_->Post(Call(Collective::kAllGather, send, recv, count, dtype));
}
Work Communicator::IReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl_->Post(Call(Collective::kReduceScatter, send, recv, count, dtype, op));
}
Work Communicator::IGather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Post(Call(Collective::kGather, send, recv, count, dtype, ReduceOp::kSum, root));
}
Work Communicator::IScatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl_->Post(Call(Collective::kScatter, send, recv, count, dtype, ReduceOp::kSum, root));
}
Work Communicator::IAllToAll(const void* send, void* recv, size_t count, DataType dtype) {
  return impl_->Post(Call(Collective::kAllToAll, send, recv, count, dtype));
}
Work Communicator::IBarrier() { return impl_->Post(Call(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8)); }

Result<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  Result<std::unique_ptr<internal::CommunicatorImpl>> child = impl_->Split(color, key);
  if (!child.ok()) return child.status();
  if (child.value() == nullptr) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new Communicator(std::move(child.value())));
}

Status Communicator::Shutdown() { return impl_->Shutdown(); }

void Communicator::Abort(const std::string& reason) { impl_->Abort(AbortedError(reason)); }

}  // namespace chorus
