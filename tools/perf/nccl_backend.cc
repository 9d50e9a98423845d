// NCCL as a chorus_perf backend (--backend nccl): device buffers only, every call
// enqueued on one CUDA stream and waited for (the harness's calls are blocking). The
// unique id travels through chorus's own key-value store at MASTER_ADDR:MASTER_PORT
// (rank 0 serves it), as torchrun's variables say. The device is LOCAL_RANK modulo
// the visible devices (0 on a one-GPU machine: several ranks then share it, which NCCL
// allows with a distinct NCCL_HOSTID per rank or NCCL_MULTI_RANK_GPU_ENABLE=1).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/stream_ops.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "tools/perf/backend.h"
#include "tools/perf/nccl_lib.h"
#include "tools/perf/watchdog.h"

namespace chorus {
namespace perf {
namespace {

namespace cuda = kernels::cuda;

class NcclBackend : public Backend {
 public:
  ~NcclBackend() override {
    if (comm_ == nullptr) return;
    // After a fault on the device (sticky: the stream says so at once) NCCL's destroy
    // waits for streams that never finish: the process ends without it.
    if (Status st = cuda::Synchronize(stream_.get()); !st.ok()) {
      std::fprintf(stderr, "chorus_perf: rank %d: NCCL communicator left undestroyed: %s\n", rank_,
                   st.message().c_str());
      return;
    }
    Armed guard(*dog_, "ncclCommDestroy", timeout_);
    nccl_->CommDestroy(comm_);
  }

  bool accepts_device_buffers() const override { return true; }
  bool requires_device_buffers() const override { return true; }

  Status Init(const BackendOptions& o) override {
    Result<std::unique_ptr<NcclLib>> lib = NcclLib::Load(o.nccl_lib);
    if (!lib.ok()) return lib.status();
    nccl_ = std::move(lib.value());
    rank_ = o.rank;
    size_ = o.world_size;
    if (rank_ < 0 || size_ < 1) return InvalidArgument("nccl needs RANK and WORLD_SIZE");
    if (o.master_addr.empty() || o.master_port <= 0) return InvalidArgument("nccl needs MASTER_ADDR and MASTER_PORT");
    timeout_ = o.timeout;
    stream_order_ = o.stream_order;
    dog_ = std::make_unique<Watchdog>("rank " + std::to_string(rank_));
    CHORUS_RETURN_IF_ERROR(cuda::DeviceStatus());
    const char* local = std::getenv("LOCAL_RANK");
    device_ = (local ? std::atoi(local) : rank_) % std::max(1, cuda::DeviceCount());
    CHORUS_RETURN_IF_ERROR(cuda::SetDevice(device_));
    Result<cuda::Stream> stream = cuda::Stream::Create();
    if (!stream.ok()) return stream.status();
    stream_ = std::move(stream.value());
    Result<cuda::DeviceBuffer> scratch = cuda::DeviceBuffer::Allocate(sizeof(double));
    if (!scratch.ok()) return scratch.status();
    scratch_ = std::move(scratch.value());

    // The unique id: made by rank 0, handed out through the store.
    if (rank_ == 0) {
      Result<std::unique_ptr<rendezvous::StoreServer>> server =
          rendezvous::StoreServer::Start("", static_cast<uint16_t>(o.master_port));
      if (!server.ok()) return server.status().WithContext("nccl rendezvous on rank 0");
      server_ = std::move(server.value());
    }
    Result<std::unique_ptr<rendezvous::StoreClient>> client = rendezvous::StoreClient::Connect(
        o.master_addr, static_cast<uint16_t>(o.master_port), Deadline::After(o.timeout));
    if (!client.ok()) return client.status().WithContext("nccl rendezvous");
    store_ = std::move(client.value());
    NcclUniqueId id{};
    const std::string key = "chorus_perf/nccl_unique_id";
    if (rank_ == 0) {
      CHORUS_RETURN_IF_ERROR(nccl_->Check(nccl_->GetUniqueId(&id), "ncclGetUniqueId"));
      CHORUS_RETURN_IF_ERROR(store_->Set(key, std::string(id.internal, sizeof(id.internal))));
    } else {
      Result<std::string> v = store_->Get(key, o.timeout);
      if (!v.ok()) return v.status().WithContext("waiting for rank 0's NCCL unique id");
      if (v->size() != sizeof(id.internal)) return InternalError("NCCL unique id of the wrong size in the store");
      std::memcpy(id.internal, v->data(), sizeof(id.internal));
    }
    Armed guard(*dog_, "ncclCommInitRank", timeout_);
    CHORUS_RETURN_IF_ERROR(nccl_->Check(nccl_->CommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank"));
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  std::string algo() const override { return "library default (NCCL_ALGO / NCCL_PROTO pick)"; }
  std::string description() const override {
    return nccl_ ? "NCCL " + nccl_->version() + ", device " + std::to_string(device_) : "";
  }

  Status Supports(Collective coll, DataType dtype, ReduceOp op) const override {
    int t = 0, o = 0;
    if (coll != Collective::kBarrier && !NcclDataType(dtype, &t)) return Unavailable("NCCL has no such type");
    if (HasReduceOp(coll) && !NcclRedOp(op, &o)) return Unavailable("NCCL has no such reduction");
    return Status::Ok();
  }

  Status Flush() override {
    Armed guard(*dog_, "the stream wait after NCCL's calls", timeout_);
    return cuda::Synchronize(stream_.get());
  }

  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    Armed guard(*dog_, "nccl AllReduce", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclAllReduce", send, recv));
    return Run("ncclAllReduce", nccl_->AllReduce(send, recv, count, Type(dtype), Op(op), comm_, stream_.get()));
  }
  Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    Armed guard(*dog_, "nccl Broadcast", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclBroadcast", send, recv));
    return Run("ncclBroadcast", nccl_->Broadcast(send, recv, count, Type(dtype), root, comm_, stream_.get()));
  }
  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) override {
    Armed guard(*dog_, "nccl Reduce", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclReduce", send, recv));
    return Run("ncclReduce", nccl_->Reduce(send, recv, count, Type(dtype), Op(op), root, comm_, stream_.get()));
  }
  Status AllGather(const void* send, void* recv, size_t count, DataType dtype) override {
    Armed guard(*dog_, "nccl AllGather", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclAllGather", send, recv));
    return Run("ncclAllGather", nccl_->AllGather(send, recv, count, Type(dtype), comm_, stream_.get()));
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    Armed guard(*dog_, "nccl ReduceScatter", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclReduceScatter", send, recv));
    return Run("ncclReduceScatter", nccl_->ReduceScatter(send, recv, count, Type(dtype), Op(op), comm_, stream_.get()));
  }
  Status SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DataType dtype) override {
    Armed guard(*dog_, "nccl SendRecv", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclSendRecv", send, recv));
    nccl_->GroupStart();
    nccl_->Send(send, count, Type(dtype), send_peer, comm_, stream_.get());
    nccl_->Recv(recv, count, Type(dtype), recv_peer, comm_, stream_.get());
    return Run("ncclGroupEnd (send/recv)", nccl_->GroupEnd());
  }
  // All-to-all, gather and scatter as grouped sends and receives (NCCL has no such call).
  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype) override {
    Armed guard(*dog_, "nccl AllToAll", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclAllToAll", send, recv));
    if (send == recv) return Unavailable("NCCL all_to_all has no in-place form");
    const size_t block = count * DataTypeSize(dtype);
    nccl_->GroupStart();
    for (int p = 0; p < size_; ++p) {
      nccl_->Send(static_cast<const char*>(send) + p * block, count, Type(dtype), p, comm_, stream_.get());
      nccl_->Recv(static_cast<char*>(recv) + p * block, count, Type(dtype), p, comm_, stream_.get());
    }
    return Run("ncclGroupEnd (all_to_all)", nccl_->GroupEnd());
  }
  Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    Armed guard(*dog_, "nccl Gather", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclGather", send, recv));
    const size_t block = count * DataTypeSize(dtype);
    nccl_->GroupStart();
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        char* dst = static_cast<char*>(recv) + p * block;
        if (p != root) nccl_->Recv(dst, count, Type(dtype), p, comm_, stream_.get());
      }
    } else {
      nccl_->Send(send, count, Type(dtype), root, comm_, stream_.get());
    }
    CHORUS_RETURN_IF_ERROR(Run("ncclGroupEnd (gather)", nccl_->GroupEnd()));
    char* own = static_cast<char*>(recv) + root * block;
    if (rank_ != root || send == own) return Status::Ok();
    CHORUS_RETURN_IF_ERROR(cuda::CopyDeviceToDevice(own, send, block, stream_.get()));
    return Drained();
  }
  Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    Armed guard(*dog_, "nccl Scatter", timeout_);
    CHORUS_RETURN_IF_ERROR(OnDevice("ncclScatter", send, recv));
    const size_t block = count * DataTypeSize(dtype);
    nccl_->GroupStart();
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        const char* src = static_cast<const char*>(send) + p * block;
        if (p != root) nccl_->Send(src, count, Type(dtype), p, comm_, stream_.get());
      }
    } else {
      nccl_->Recv(recv, count, Type(dtype), root, comm_, stream_.get());
    }
    CHORUS_RETURN_IF_ERROR(Run("ncclGroupEnd (scatter)", nccl_->GroupEnd()));
    const char* own = static_cast<const char*>(send) + root * block;
    if (rank_ != root || recv == own) return Status::Ok();
    CHORUS_RETURN_IF_ERROR(cuda::CopyDeviceToDevice(recv, own, block, stream_.get()));
    return Drained();
  }

  Status Barrier() override { return AllReduceMaxDouble(0).status(); }

  Result<double> AllReduceMaxDouble(double value) override { return Scalar(value, /*ncclMax*/ 2); }
  Result<double> AllReduceSumDouble(double value) override { return Scalar(value, /*ncclSum*/ 0); }

 private:
  static int Type(DataType t) {
    int v = 0;
    NcclDataType(t, &v);  // Supports() refused the others
    return v;
  }
  static int Op(ReduceOp op) {
    int v = 0;
    NcclRedOp(op, &v);
    return v;
  }
  // NCCL reads every pointer as device memory: a host pointer faults the device, and the
  // fault poisons every later CUDA call of the process. Refused here instead, naming the
  // buffer (checked once per pair of pointers; null = not significant on this rank).
  Status OnDevice(const char* what, const void* send, const void* recv) {
    if (send == checked_.first && recv == checked_.second) return Status::Ok();
    for (auto [p, name] : {std::pair<const void*, const char*>{send, "send"}, {recv, "recv"}}) {
      if (p == nullptr) continue;
      const cuda::MemoryKind k = cuda::PointerKind(p);
      if (k != cuda::MemoryKind::kDevice && k != cuda::MemoryKind::kManaged) {
        return InvalidArgument(std::string(what) + " on rank " + std::to_string(rank_) + ": the " + name +
                               " buffer is " + cuda::MemoryKindName(k) + " memory; NCCL takes device buffers only");
      }
    }
    checked_ = {send, recv};
    return Status::Ok();
  }
  // The call's result; then, unless calls go in stream order (Flush waits for them),
  // the stream drained.
  Status Run(const char* what, NcclResult r) {
    CHORUS_RETURN_IF_ERROR(nccl_->Check(r, what));
    return Drained();
  }
  Status Drained() { return stream_order_ ? Status::Ok() : cuda::Synchronize(stream_.get()); }
  Result<double> Scalar(double value, int op) {
    Armed guard(*dog_, "ncclAllReduce of one double", timeout_);
    CHORUS_RETURN_IF_ERROR(cuda::CopyToDevice(scratch_.get(), &value, sizeof(value)));
    CHORUS_RETURN_IF_ERROR(
        nccl_->Check(nccl_->AllReduce(scratch_.get(), scratch_.get(), 1, /*ncclFloat64*/ 8, op, comm_, stream_.get()),
                     "ncclAllReduce (double)"));
    CHORUS_RETURN_IF_ERROR(cuda::Synchronize(stream_.get()));
    double out = 0;
    CHORUS_RETURN_IF_ERROR(cuda::CopyToHost(&out, scratch_.get(), sizeof(out)));
    return out;
  }

  std::unique_ptr<NcclLib> nccl_;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::StoreClient> store_;
  NcclComm comm_ = nullptr;
  cuda::Stream stream_;
  cuda::DeviceBuffer scratch_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  bool stream_order_ = false;                                      // BackendOptions::stream_order
  std::pair<const void*, const void*> checked_{nullptr, nullptr};  // OnDevice's last pair
  // Every NCCL call and the stream wait after it (neither has a deadline of its own).
  std::chrono::milliseconds timeout_{std::chrono::seconds(120)};
  std::unique_ptr<Watchdog> dog_;
};

// NOLINTNEXTLINE(cert-err58-cpp): a throw while registering ends the program, as it should
[[maybe_unused]] const bool kRegistered = RegisterBackend("nccl", [] { return std::make_unique<NcclBackend>(); });

}  // namespace
}  // namespace perf
}  // namespace chorus
