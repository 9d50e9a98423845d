#include "tools/perf/gloo_backend.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "rendezvous/store_server.h"
#include "tools/perf/gloo_store.h"

namespace chorus {
namespace perf {
namespace {

template <typename T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<T>) with gloo's element type for dtype; kUnavailable for bfloat16.
template <typename Fn>
Status WithGlooType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32: return fn(Tag<float>());
    case DataType::kFloat64: return fn(Tag<double>());
    case DataType::kFloat16: return fn(Tag<gloo::float16>());
    case DataType::kInt8: return fn(Tag<int8_t>());
    case DataType::kUint8: return fn(Tag<uint8_t>());
    case DataType::kInt32: return fn(Tag<int32_t>());
    case DataType::kInt64: return fn(Tag<int64_t>());
    case DataType::kBFloat16: break;
  }
  return Unavailable(std::string("gloo has no ") + DataTypeName(dtype) + " type");
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn NewStyleFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::kProd: return static_cast<ReduceFn>(&gloo::product<T>);
    case ReduceOp::kMax: return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kMin: return static_cast<ReduceFn>(&gloo::min<T>);
    case ReduceOp::kAvg: break;
  }
  return nullptr;
}

template <typename T>
const gloo::ReductionFunction<T>* OldStyleFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kProd: return gloo::ReductionFunction<T>::product;
    case ReduceOp::kMax: return gloo::ReductionFunction<T>::max;
    case ReduceOp::kMin: return gloo::ReductionFunction<T>::min;
    case ReduceOp::kAvg: break;
  }
  return nullptr;
}

bool Overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The local IPv4 address the kernel would use to reach `host` (no packet is sent).
std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

enum class AllReduceAlgo { kRing, kBcube, kRingChunked, kHalvingDoubling, kRingLegacy };

class GlooBackend : public Backend {
 public:
  ~GlooBackend() override {
    legacy_.reset();
    context_.reset();
    store_.reset();
    server_.reset();
  }

  Status Init(const BackendOptions& o) override {
    if (o.rank < 0 || o.world_size <= 0 || o.rank >= o.world_size) {
      return InvalidArgument("gloo needs RANK in [0, WORLD_SIZE) and WORLD_SIZE >= 1 (got RANK=" +
                             std::to_string(o.rank) + ", WORLD_SIZE=" + std::to_string(o.world_size) + ")");
    }
    const std::string algo = o.algo.empty() ? "ring" : o.algo;
    if (algo == "ring")
      algo_ = AllReduceAlgo::kRing;
    else if (algo == "bcube")
      algo_ = AllReduceAlgo::kBcube;
    else if (algo == "ring_chunked")
      algo_ = AllReduceAlgo::kRingChunked;
    else if (algo == "halving_doubling")
      algo_ = AllReduceAlgo::kHalvingDoubling;
    else if (algo == "ring_legacy")
      algo_ = AllReduceAlgo::kRingLegacy;
    else {
      return InvalidArgument("gloo --algo '" + algo +
                             "' is not one of ring, bcube, ring_chunked, halving_doubling, ring_legacy");
    }
    algo_name_ = algo;
    rank_ = o.rank;
    size_ = o.world_size;
    timeout_ = o.timeout;
    try {
      gloo::transport::tcp::attr attr;
      if (!o.socket_ifname.empty()) {
        attr.iface = o.socket_ifname;
      } else {
        attr.hostname = o.master_addr.empty() ? "127.0.0.1" : LocalAddressToward(o.master_addr);
        if (attr.hostname.empty()) {
          return InvalidArgument("gloo: no local address routes to MASTER_ADDR '" + o.master_addr +
                                 "'; set CHORUS_SOCKET_IFNAME");
        }
      }
      bind_ = attr.iface.empty() ? attr.hostname : "iface " + attr.iface;
      device_ = gloo::transport::tcp::CreateDevice(attr);

      auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
      context->setTimeout(timeout_);
      if (!o.store.empty()) {
        file_store_ = std::make_unique<gloo::rendezvous::FileStore>(o.store);
        // A per-run prefix keeps a reused directory from serving a previous run's keys.
        prefix_store_ = std::make_unique<gloo::rendezvous::PrefixStore>("chorus_perf_" + std::to_string(o.master_port),
                                                                        *file_store_);
        context->connectFullMesh(*prefix_store_, device_);
      } else {
        if (o.master_addr.empty() || o.master_port <= 0) {
          return InvalidArgument("gloo needs MASTER_ADDR and MASTER_PORT (or --gloo-store DIR)");
        }
        if (rank_ == 0) {
          Result<std::unique_ptr<rendezvous::StoreServer>> server =
              rendezvous::StoreServer::Start("", static_cast<uint16_t>(o.master_port));
          if (!server.ok()) return server.status().WithContext("gloo rendezvous on rank 0");
          server_ = std::move(server.value());
        }
        Result<std::unique_ptr<GlooStore>> store = GlooStore::Connect(o.master_addr, o.master_port, timeout_);
        if (!store.ok()) return store.status();
        store_ = std::move(store.value());
        context->connectFullMesh(*store_, device_);
      }
      context_ = context;
    } catch (const std::exception& e) {
      return PeerFailed(std::string("gloo rendezvous failed: ") + e.what());
    }
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  std::string algo() const override { return algo_name_; }
  std::string description() const override {
    return "gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
           std::to_string(GLOO_VERSION_PATCH) + ", tcp transport bound to " + bind_;
  }

  Status Supports(Collective coll, DataType dtype, ReduceOp op) const override {
    if (coll != Collective::kBarrier && dtype == DataType::kBFloat16) {
      return Unavailable("gloo has no bfloat16 type; use another --datatype");
    }
    if (HasReduceOp(coll) && op == ReduceOp::kAvg) {
      return Unavailable("gloo has no avg reduction (sum, prod, max, min only)");
    }
    return Status::Ok();
  }

  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    return Guard("all_reduce", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        if (algo_ == AllReduceAlgo::kRing || algo_ == AllReduceAlgo::kBcube) {
          gloo::AllreduceOptions opts(context_);
          opts.setAlgorithm(algo_ == AllReduceAlgo::kRing ? gloo::AllreduceOptions::Algorithm::RING
                                                          : gloo::AllreduceOptions::Algorithm::BCUBE);
          if (send != recv) opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
          opts.setOutput(static_cast<T*>(recv), count);
          opts.setReduceFunction(NewStyleFn<T>(op));
          opts.setTag(NextTag());
          gloo::allreduce(opts);
          return Status::Ok();
        }
        // The legacy classes reduce in place and bind their buffers at construction:
        // keep one instance per (buffer, count, dtype, op) across the timed iterations.
        if (send != recv) std::memcpy(recv, send, count * sizeof(T));
        const LegacyKey key{recv, count, dtype, op, 0};
        if (!legacy_ || !(legacy_key_ == key)) {
          legacy_.reset();
          std::vector<T*> ptrs = {static_cast<T*>(recv)};
          const int n = static_cast<int>(count);
          if (algo_ == AllReduceAlgo::kRingChunked) {
            legacy_ = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, ptrs, n, OldStyleFn<T>(op));
          } else if (algo_ == AllReduceAlgo::kHalvingDoubling) {
            legacy_ = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, ptrs, n, OldStyleFn<T>(op));
          } else {
            legacy_ = std::make_unique<gloo::AllreduceRing<T>>(context_, ptrs, n, OldStyleFn<T>(op));
          }
          legacy_key_ = key;
        }
        legacy_->run();
        return Status::Ok();
      });
    });
  }

  Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    return Guard("broadcast", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        gloo::BroadcastOptions opts(context_);
        if (rank_ == root && send != recv) opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
        opts.setOutput(static_cast<T*>(recv), count);
        opts.setRoot(root);
        opts.setTag(NextTag());
        gloo::broadcast(opts);
        return Status::Ok();
      });
    });
  }

  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) override {
    return Guard("reduce", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        gloo::ReduceOptions opts(context_);
        if (send != recv) opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
        opts.setOutput(static_cast<T*>(recv), count);
        opts.setRoot(root);
        opts.setReduceFunction(NewStyleFn<T>(op));
        opts.setTag(NextTag());
        gloo::reduce(opts);
        return Status::Ok();
      });
    });
  }

  Status AllGather(const void* send, void* recv, size_t count, DataType dtype) override {
    return Guard("all_gather", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        const T* in = Unalias<T>(send, count, recv, count * size_);
        gloo::AllgatherOptions opts(context_);
        opts.setInput(const_cast<T*>(in), count);
        opts.setOutput(static_cast<T*>(recv), count * size_);
        opts.setTag(NextTag());
        gloo::allgather(opts);
        return Status::Ok();
      });
    });
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    return Guard("reduce_scatter", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        // ReduceScatterHalvingDoubling reduces in place in a full-size buffer and leaves
        // this rank's block at its start.
        const size_t total = count * size_;
        if (rs_scratch_.size() < total * sizeof(T)) rs_scratch_.resize(total * sizeof(T));
        T* work = reinterpret_cast<T*>(rs_scratch_.data());
        std::memcpy(static_cast<void*>(work), send, total * sizeof(T));
        const LegacyKey key{work, total, dtype, op, 1};
        if (!legacy_ || !(legacy_key_ == key)) {
          legacy_.reset();
          std::vector<T*> ptrs = {work};
          std::vector<int> elems(size_, static_cast<int>(count));
          legacy_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(context_, ptrs, static_cast<int>(total),
                                                                            elems, OldStyleFn<T>(op));
          legacy_key_ = key;
        }
        legacy_->run();
        // gloo::float16 is a uint16_t whose copy constructor is user-written.
        std::memcpy(recv, work, count * sizeof(T));  // NOLINT(bugprone-undefined-memory-manipulation)
        return Status::Ok();
      });
    });
  }

  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype) override {
    return Guard("all_to_all", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        const size_t total = count * size_;
        const T* in = Unalias<T>(send, total, recv, total);
        gloo::AlltoallOptions opts(context_);
        opts.setInput(const_cast<T*>(in), total);
        opts.setOutput(static_cast<T*>(recv), total);
        opts.setTag(NextTag());
        gloo::alltoall(opts);
        return Status::Ok();
      });
    });
  }

  Status SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DataType dtype) override {
    return Guard("sendrecv", [&] {
      const size_t bytes = count * DataTypeSize(dtype);
      const void* src = send;
      if (Overlaps(send, bytes, recv, bytes)) {
        if (scratch_.size() < bytes) scratch_.resize(bytes);
        std::memcpy(scratch_.data(), send, bytes);
        src = scratch_.data();
      }
      auto out = context_->createUnboundBuffer(const_cast<void*>(src), bytes);
      auto in = context_->createUnboundBuffer(recv, bytes);
      const uint64_t slot = gloo::Slot::build(kSendRecvSlotPrefix, NextTag());
      in->recv(recv_peer, slot);
      out->send(send_peer, slot);
      if (!in->waitRecv(timeout_) || !out->waitSend(timeout_)) {
        return PeerFailed("gloo sendrecv was aborted");
      }
      return Status::Ok();
    });
  }

  Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    return Guard("gather", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        const T* in = rank_ == root ? Unalias<T>(send, count, recv, count * size_) : static_cast<const T*>(send);
        gloo::GatherOptions opts(context_);
        opts.setInput(const_cast<T*>(in), count);
        if (rank_ == root) opts.setOutput(static_cast<T*>(recv), count * size_);
        opts.setRoot(root);
        opts.setTag(NextTag());
        gloo::gather(opts);
        return Status::Ok();
      });
    });
  }

  Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    return Guard("scatter", [&] {
      return WithGlooType(dtype, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        gloo::ScatterOptions opts(context_);
        if (rank_ == root) {
          const T* in = Unalias<T>(send, count * size_, recv, count);
          std::vector<T*> blocks;
          for (int r = 0; r < size_; ++r) blocks.push_back(const_cast<T*>(in) + count * r);
          opts.setInputs(blocks, count);
        }
        opts.setOutput(static_cast<T*>(recv), count);
        opts.setRoot(root);
        opts.setTag(NextTag());
        gloo::scatter(opts);
        return Status::Ok();
      });
    });
  }

  Status Barrier() override {
    return Guard("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      gloo::barrier(opts);
      return Status::Ok();
    });
  }

  Result<double> AllReduceMaxDouble(double value) override { return ScalarAllReduce(value, ReduceOp::kMax); }
  Result<double> AllReduceSumDouble(double value) override { return ScalarAllReduce(value, ReduceOp::kSum); }

 private:
  static constexpr uint8_t kSendRecvSlotPrefix = 0x50;  // unused by gloo's own collectives

  struct LegacyKey {
    const void* ptr = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    int kind = 0;  // 0 all_reduce, 1 reduce_scatter
    bool operator==(const LegacyKey& o) const {
      return ptr == o.ptr && count == o.count && dtype == o.dtype && op == o.op && kind == o.kind;
    }
  };

  // Gloo reports failures (timeouts, closed peers, bad arguments) by throwing.
  template <typename Fn>
  Status Guard(const char* what, Fn&& fn) {
    if (!context_) return InvalidArgument(std::string("gloo ") + what + " called before Init");
    try {
      return fn();
    } catch (const std::exception& e) {
      return PeerFailed(std::string("gloo ") + what + " failed on rank " + std::to_string(rank_) + ": " + e.what());
    }
  }

  // Tags only need to differ between operations in flight at once; all calls here block,
  // but a changing tag makes a rank that fell out of step fail instead of mixing data.
  uint32_t NextTag() { return tag_++ & 0xffffff; }

  // The send pointer, or a scratch copy of it when it overlaps recv (gloo's collectives
  // assume distinct buffers).
  template <typename T>
  const T* Unalias(const void* send, size_t send_count, const void* recv, size_t recv_count) {
    const size_t bytes = send_count * sizeof(T);
    if (!Overlaps(send, bytes, recv, recv_count * sizeof(T))) return static_cast<const T*>(send);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    std::memcpy(scratch_.data(), send, bytes);
    return reinterpret_cast<const T*>(scratch_.data());
  }

  Result<double> ScalarAllReduce(double value, ReduceOp op) {
    double v = value;
    Status st = Guard("scalar all_reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(&v, 1);
      opts.setReduceFunction(NewStyleFn<double>(op));
      opts.setTag(NextTag());
      gloo::allreduce(opts);
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return v;
  }

  int rank_ = -1;
  int size_ = 0;
  std::chrono::milliseconds timeout_{0};
  AllReduceAlgo algo_ = AllReduceAlgo::kRing;
  std::string algo_name_;
  std::string bind_;
  uint32_t tag_ = 1;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<GlooStore> store_;
  std::unique_ptr<gloo::rendezvous::FileStore> file_store_;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefix_store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::Algorithm> legacy_;
  LegacyKey legacy_key_;
  std::vector<char> scratch_;
  std::vector<char> rs_scratch_;
};

// NOLINTNEXTLINE(cert-err58-cpp): a throw while registering ends the program, as it should
[[maybe_unused]] const bool kRegistered = RegisterBackend("gloo", [] { return MakeGlooBackend(); });

}  // namespace

std::unique_ptr<Backend> MakeGlooBackend() { return std::make_unique<GlooBackend>(); }

}  // namespace perf
}  // namespace chorus
