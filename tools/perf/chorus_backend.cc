#include "tools/perf/chorus_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/config.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus {
namespace perf {
namespace {

bool Overlaps(const void* a, const void* b, size_t bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return pa < pb + bytes && pb < pa + bytes;
}

class ChorusBackend : public Backend {
 public:
  ~ChorusBackend() override {
    if (comm_) {
      Status st = comm_->Shutdown();
      (void)st;  // the harness already reported the run; a late peer only delays exit
    }
  }

  Status Init(const BackendOptions& o) override {
    if (o.rank < 0 || o.world_size <= 0 || o.rank >= o.world_size) {
      return InvalidArgument("chorus needs RANK in [0, WORLD_SIZE) and WORLD_SIZE >= 1 (got RANK=" +
                             std::to_string(o.rank) + ", WORLD_SIZE=" + std::to_string(o.world_size) + ")");
    }
    if (o.master_addr.empty() || o.master_port <= 0) {
      return InvalidArgument("chorus needs MASTER_ADDR and MASTER_PORT (rank 0 serves the rendezvous there)");
    }
    CHORUS_RETURN_IF_ERROR(Config::ProcessConfigStatus());
    Config config = Config::Process();  // CHORUS_ALGO, CHORUS_NSOCKS_PERPEER, ... as the user set them
    if (!o.algo.empty() && o.algo != "auto") {
      Result<algos::Algorithm> forced = algos::ParseAlgorithm(o.algo);
      if (!forced.ok()) return forced.status().WithContext("chorus_perf --algo (set as CHORUS_ALGO)");
      config.algo = forced.value();
    }
    if (!o.socket_ifname.empty()) config.socket_ifname = o.socket_ifname;
    const int64_t timeout_ms = std::max<int64_t>(1, o.timeout.count());
    config.timeout_ms = timeout_ms;
    config.connect_timeout_ms = std::min(config.connect_timeout_ms, timeout_ms);
    algo_ = config.algo ? algos::AlgorithmName(*config.algo) : "auto (cost model)";
    stream_order_ = o.stream_order;

    Options options;
    // An IPv6 literal needs brackets in the URL.
    const bool v6 = o.master_addr.find(':') != std::string::npos && o.master_addr.front() != '[';
    options.init_method =
        "tcp://" + (v6 ? "[" + o.master_addr + "]" : o.master_addr) + ":" + std::to_string(o.master_port);
    options.rank = o.rank;
    options.world_size = o.world_size;
    options.config = config;
    Result<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
    if (!comm.ok()) {
      if (!o.algo.empty())
        return comm.status().WithContext("chorus_perf --algo '" + o.algo + "' is set as CHORUS_ALGO");
      return comm.status();
    }
    comm_ = std::move(comm.value());
    return Status::Ok();
  }

  int rank() const override { return comm_ ? comm_->rank() : -1; }
  int size() const override { return comm_ ? comm_->size() : 0; }
  std::string name() const override { return "chorus"; }
  std::string algo() const override { return algo_; }
  // Device pointers go through chorus's host-form calls: CUDA IPC where every rank is on
  // this host (unless CHORUS_CUDA_IPC=off), else staged through host memory.
  bool accepts_device_buffers() const override { return true; }
  std::string description() const override { return comm_ ? comm_->Describe() : ""; }
  std::string explain(Collective coll, size_t count, DataType dtype) const override {
    // Host buffers only: device buffers may go through CUDA IPC instead (the footer's
    // counts of device-buffer calls say which way they went).
    if (!comm_ || coll == Collective::kSendRecv) return "";
    const TrafficCounters c = comm_->Counters();
    if (c.device_calls_ipc + c.device_calls_staged > 0) return "";
    Result<std::string> why = comm_->Explain(CollectiveName(coll), count, dtype);
    if (!why.ok()) return "";
    const size_t over = why->find(", over ");  // the transport: in the header already
    return over == std::string::npos ? *why : why->substr(0, over);
  }

  std::string diagnostics() const override {
    if (!comm_) return "";
    const TrafficCounters c = comm_->Counters();
    char text[256];
    int len =
        std::snprintf(text, sizeof(text), "rank %d: %llu messages (%.1f MiB) arrived before their receive was posted",
                      comm_->rank(), static_cast<unsigned long long>(c.early_messages), c.early_bytes / 1048576.0);
    if (c.device_calls_ipc + c.device_calls_staged > 0 && len > 0 && len < static_cast<int>(sizeof(text))) {
      std::snprintf(text + len, sizeof(text) - len,
                    "; device-buffer calls: %llu through CUDA IPC (%llu with flags), %llu staged"
                    " (%llu with signal flags)",
                    static_cast<unsigned long long>(c.device_calls_ipc),
                    static_cast<unsigned long long>(c.device_calls_ipc_flags),
                    static_cast<unsigned long long>(c.device_calls_staged),
                    static_cast<unsigned long long>(c.device_calls_signalled));
    }
    return text;
  }

  // chorus has every dtype and op for every collective: nothing to refuse up front.
  Status Supports(Collective, DataType, ReduceOp) const override { return Status::Ok(); }

  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(recv)) return Enqueue(comm_->AllReduce(send, recv, count, dtype, op, stream()));
    return comm_->AllReduce(send, recv, count, dtype, op);
  }

  Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    const bool on_stream = OnStream(recv);
    // Host buffers: chorus's out-of-place form, which copies while it sends.
    if (!on_stream && kernels::cuda::PointerKind(recv) != kernels::cuda::MemoryKind::kDevice) {
      return comm_->Broadcast(send, recv, count, dtype, root);
    }
    if (comm_->rank() == root && send != recv) {
      const size_t bytes = count * DataTypeSize(dtype);
      if (on_stream) {
        CHORUS_RETURN_IF_ERROR(kernels::cuda::CopyDeviceToDevice(recv, send, bytes, stream().handle));
      } else {  // --blocking
        CHORUS_RETURN_IF_ERROR(kernels::cuda::CopyDeviceToDevice(recv, send, bytes, nullptr));
        CHORUS_RETURN_IF_ERROR(kernels::cuda::Synchronize(nullptr));
      }
    }
    if (on_stream) return Enqueue(comm_->Broadcast(recv, count, dtype, root, stream()));
    return comm_->Broadcast(recv, count, dtype, root);
  }

  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(send)) return Enqueue(comm_->Reduce(send, recv, count, dtype, op, root, stream()));
    return comm_->Reduce(send, recv, count, dtype, op, root);
  }

  Status AllGather(const void* send, void* recv, size_t count, DataType dtype) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(recv)) return Enqueue(comm_->AllGather(send, recv, count, dtype, stream()));
    return comm_->AllGather(send, recv, count, dtype);
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(recv)) return Enqueue(comm_->ReduceScatter(send, recv, count, dtype, op, stream()));
    return comm_->ReduceScatter(send, recv, count, dtype, op);
  }

  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(recv)) return Enqueue(comm_->AllToAll(send, recv, count, dtype, stream()));
    return comm_->AllToAll(send, recv, count, dtype);
  }

  Status SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DataType dtype) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    const size_t bytes = count * DataTypeSize(dtype);
    if (kernels::cuda::PointerKind(send) == kernels::cuda::MemoryKind::kDevice) {
      return Unavailable(
          "sendrecv on device buffers: this backend exchanges with ISend/IRecv, which take host buffers");
    }
    const void* src = send;
    if (Overlaps(send, recv, bytes)) {
      if (scratch_.size() < bytes) scratch_.resize(bytes);
      std::memcpy(scratch_.data(), send, bytes);
      src = scratch_.data();
    }
    // Receive posted first so that a peer's send never waits for it.
    Work in = comm_->IRecv(recv, bytes, recv_peer, kSendRecvTag);
    Work out = comm_->ISend(src, bytes, send_peer, kSendRecvTag);
    Status st_out = out.Wait();
    Status st_in = in.Wait();
    return st_out.ok() ? st_in : st_out;
  }

  Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(send)) return Enqueue(comm_->Gather(send, recv, count, dtype, root, stream()));
    return comm_->Gather(send, recv, count, dtype, root);
  }

  Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    CHORUS_RETURN_IF_ERROR(Ready());
    if (OnStream(recv)) return Enqueue(comm_->Scatter(send, recv, count, dtype, root, stream()));
    return comm_->Scatter(send, recv, count, dtype, root);
  }

  Status Barrier() override {
    CHORUS_RETURN_IF_ERROR(Ready());
    return comm_->Barrier();
  }

  // Every Work enqueued since the last Flush; the first error among them.
  Status Flush() override {
    Status first = Status::Ok();
    for (Work& w : pending_) {
      Status st = w.Wait();
      if (first.ok() && !st.ok()) first = st;
    }
    pending_.clear();
    if (first.ok() && stream_.get() != nullptr) first = kernels::cuda::Synchronize(stream_.get());  // broadcast's copy
    return first;
  }

  Result<double> AllReduceMaxDouble(double value) override { return Scalar(value, ReduceOp::kMax); }
  Result<double> AllReduceSumDouble(double value) override { return Scalar(value, ReduceOp::kSum); }

 private:
  static constexpr uint32_t kSendRecvTag = 0x5e4d;  // any fixed tag: matching is in order per peer

  Status Ready() const {
    if (!comm_) return InvalidArgument("chorus backend used before Init");
    return Status::Ok();
  }

  // Device buffers in stream order (BackendOptions::stream_order): the stream form of
  // the call, on this backend's stream, its Work kept for Flush().
  // The pointer kind is asked once per buffer, not in every timed call.
  bool OnStream(const void* p) {
    if (!stream_order_ || p == nullptr) return false;
    if (p != checked_.first) checked_ = {p, kernels::cuda::PointerKind(p) == kernels::cuda::MemoryKind::kDevice};
    return checked_.second;
  }
  CudaStream stream() {
    if (stream_.get() == nullptr) {  // made on first use, on the device the buffers are on
      Result<kernels::cuda::Stream> s = kernels::cuda::Stream::Create();
      if (s.ok()) stream_ = std::move(s.value());  // else the legacy stream; still in order
    }
    return CudaStream{stream_.get()};
  }
  Status Enqueue(Work w) {
    if (w.Test()) return w.Wait();  // refused at once (its error), or already done
    pending_.push_back(std::move(w));
    return Status::Ok();
  }

  Result<double> Scalar(double value, ReduceOp op) {
    CHORUS_RETURN_IF_ERROR(Ready());
    double out = 0;
    CHORUS_RETURN_IF_ERROR(comm_->AllReduce(&value, &out, 1, DataType::kFloat64, op));
    return out;
  }

  std::unique_ptr<Communicator> comm_;
  std::string algo_;
  std::vector<char> scratch_;
  bool stream_order_ = false;
  std::pair<const void*, bool> checked_{nullptr, false};  // OnStream's last buffer and its verdict
  kernels::cuda::Stream stream_;
  std::vector<Work> pending_;
};

// NOLINTNEXTLINE(cert-err58-cpp): a throw while registering ends the program, as it should
[[maybe_unused]] const bool kRegistered = RegisterBackend("chorus", [] { return MakeChorusBackend(); });

}  // namespace

std::unique_ptr<Backend> MakeChorusBackend() { return std::make_unique<ChorusBackend>(); }

}  // namespace perf
}  // namespace chorus
