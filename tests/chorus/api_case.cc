#include "tests/chorus/api_case.h"

#include "kernels/cuda/device_memory.h"

namespace chorus::testing {
namespace {

using algos::Collective;

bool Rooted(Collective k) {
  return k == Collective::kBroadcast || k == Collective::kReduce || k == Collective::kGather ||
         k == Collective::kScatter;
}

// Elements of the send / recv buffers one rank needs (before in-place sharing).
size_t SendCount(const ApiCase& c, int rank, int n) {
  const size_t nn = static_cast<size_t>(n);
  switch (c.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kAllGather:
    case Collective::kGather: return c.count;
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return nn * c.count;
    case Collective::kScatter: return rank == c.root ? nn * c.count : 0;
    default: return 0;
  }
}
size_t RecvCount(const ApiCase& c, int rank, int n) {
  const size_t nn = static_cast<size_t>(n);
  switch (c.kind) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduceScatter:
    case Collective::kScatter: return c.count;
    case Collective::kReduce: return rank == c.root ? c.count : 0;
    case Collective::kAllGather:
    case Collective::kAllToAll: return nn * c.count;
    case Collective::kGather: return rank == c.root ? nn * c.count : 0;
    default: return 0;
  }
}

}  // namespace

Options FileInitOptions(int64_t timeout_ms, int64_t connect_timeout_ms) {
  Options o;
  o.init_method = "file://" + UniqueRendezvousFile();
  Config c = Config::Process();
  c.timeout_ms = timeout_ms;
  c.connect_timeout_ms = connect_timeout_ms;
  o.config = c;
  return o;
}

std::string ApiCase::Describe() const {
  std::string s =
      std::string(algos::CollectiveName(kind)) + "(count=" + std::to_string(count) + ", " + DataTypeName(dtype);
  if (kind == Collective::kAllReduce || kind == Collective::kReduce || kind == Collective::kReduceScatter) {
    s += std::string(", ") + ReduceOpName(op);
  }
  if (Rooted(kind)) s += ", root=" + std::to_string(root);
  return s + ")" + (in_place ? " in-place" : "") + " seed=" + std::to_string(seed);
}

ApiCall::ApiCall(const ApiCase& c, int rank, int size)
    : c_(c), rank_(rank), size_(size), in_(c.dtype, SendCount(c, rank, size)), out_(c.dtype, RecvCount(c, rank, size)) {
  const size_t bytes = c.count * DataTypeSize(c.dtype);
  const bool root = rank == c.root;
  out_.Poison();
  send_ = in_.data();
  recv_ = out_.data();
  switch (c.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kReduceScatter:
      FillReductionInput(c.dtype, c.op, c.seed, rank, 0, in_.count(), in_.data());
      if (c.in_place && c.kind == Collective::kReduceScatter) {
        recv_ = in_.at(rank * c.count);
      } else if (c.in_place && (c.kind == Collective::kAllReduce || root)) {
        recv_ = in_.data();
      }
      if (c.kind == Collective::kReduce && !root) recv_ = nullptr;
      break;
    case Collective::kBroadcast:
      if (root) FillBytes(c.seed, c.root, 0, bytes, out_.data());
      send_ = nullptr;
      break;
    case Collective::kAllGather:
    case Collective::kGather:
      if (c.in_place && (c.kind == Collective::kAllGather || root)) {
        // Our block already sits at its place in recv.
        send_ = out_.at(rank * c.count);
      }
      FillBytes(c.seed, rank, 0, bytes, const_cast<void*>(send_));
      if (c.kind == Collective::kGather && !root) recv_ = nullptr;
      break;
    case Collective::kScatter:
      FillBytes(c.seed, c.root, 0, in_.bytes(), in_.data());
      if (root && c.in_place) recv_ = in_.at(rank * c.count);
      if (!root) send_ = nullptr;
      break;
    case Collective::kAllToAll:
      FillBytes(c.seed, rank, 0, in_.bytes(), in_.data());
      if (c.in_place) recv_ = in_.data();
      break;
    case Collective::kBarrier: break;
  }
  if (c.count == 0 && c.null_when_empty) {
    send_ = nullptr;
    recv_ = nullptr;
  }
}

Status ApiCall::Run(Communicator& comm) { return RunOn(comm, send_, recv_); }

Status ApiCall::RunOn(Communicator& comm, const void* send, void* recv) const {
  switch (c_.kind) {
    case Collective::kAllReduce: return comm.AllReduce(send, recv, c_.count, c_.dtype, c_.op);
    case Collective::kBroadcast: return comm.Broadcast(recv, c_.count, c_.dtype, c_.root);
    case Collective::kReduce: return comm.Reduce(send, recv, c_.count, c_.dtype, c_.op, c_.root);
    case Collective::kAllGather: return comm.AllGather(send, recv, c_.count, c_.dtype);
    case Collective::kReduceScatter: return comm.ReduceScatter(send, recv, c_.count, c_.dtype, c_.op);
    case Collective::kGather: return comm.Gather(send, recv, c_.count, c_.dtype, c_.root);
    case Collective::kScatter: return comm.Scatter(send, recv, c_.count, c_.dtype, c_.root);
    case Collective::kAllToAll: return comm.AllToAll(send, recv, c_.count, c_.dtype);
    case Collective::kBarrier: return comm.Barrier();
  }
  return InternalError("unknown collective");
}

Work ApiCall::Post(Communicator& comm) {
  switch (c_.kind) {
    case Collective::kAllReduce: return comm.IAllReduce(send_, recv_, c_.count, c_.dtype, c_.op);
    case Collective::kBroadcast: return comm.IBroadcast(recv_, c_.count, c_.dtype, c_.root);
    case Collective::kReduce: return comm.IReduce(send_, recv_, c_.count, c_.dtype, c_.op, c_.root);
    case Collective::kAllGather: return comm.IAllGather(send_, recv_, c_.count, c_.dtype);
    case Collective::kReduceScatter: return comm.IReduceScatter(send_, recv_, c_.count, c_.dtype, c_.op);
    case Collective::kGather: return comm.IGather(send_, recv_, c_.count, c_.dtype, c_.root);
    case Collective::kScatter: return comm.IScatter(send_, recv_, c_.count, c_.dtype, c_.root);
    case Collective::kAllToAll: return comm.IAllToAll(send_, recv_, c_.count, c_.dtype);
    case Collective::kBarrier: return comm.IBarrier();
  }
  return Work::Failed(InternalError("unknown collective"));
}

Status ApiCall::RunOnDevice(Communicator& comm, void* stream, DeviceHook before, DeviceHook after) {
  namespace cu = kernels::cuda;
  Result<cu::DeviceBuffer> din = cu::DeviceBuffer::Allocate(in_.bytes() + 1);
  if (!din.ok()) return Fail(din.status());
  Result<cu::DeviceBuffer> dout = cu::DeviceBuffer::Allocate(out_.bytes() + 1);
  if (!dout.ok()) return Fail(dout.status());
  char* const hin = static_cast<char*>(in_.data());
  char* const hout = static_cast<char*>(out_.data());
  char* const d_in = static_cast<char*>(din.value().get());
  char* const d_out = static_cast<char*>(dout.value().get());
  // The device pointer standing where the host pointer p stands.
  auto mirror = [&](const void* p) -> char* {
    const char* c = static_cast<const char*>(p);
    if (c == nullptr) return nullptr;
    if (c >= hin && c <= hin + in_.bytes()) return d_in + (c - hin);
    return d_out + (c - hout);
  };
  char* dsend = mirror(send_);
  char* drecv = mirror(recv_);
  Status st = cu::CopyToDevice(d_in, hin, in_.bytes());
  if (st.ok()) st = cu::CopyToDevice(d_out, hout, out_.bytes());
  if (st.ok() && before) st = before(c_, dsend, drecv, stream);
  if (st.ok()) {
    if (stream == nullptr) {
      st = cu::Synchronize(nullptr);
      if (st.ok()) st = RunOn(comm, dsend, drecv);  // the host forms, given device pointers
    } else {
      // The Work is waited for only after `after` was enqueued: it must run behind the call.
      const CudaStream cs{stream};
      Work w;
      switch (c_.kind) {
        case Collective::kAllReduce: w = comm.AllReduce(dsend, drecv, c_.count, c_.dtype, c_.op, cs); break;
        case Collective::kBroadcast: w = comm.Broadcast(drecv, c_.count, c_.dtype, c_.root, cs); break;
        case Collective::kReduce: w = comm.Reduce(dsend, drecv, c_.count, c_.dtype, c_.op, c_.root, cs); break;
        case Collective::kAllGather: w = comm.AllGather(dsend, drecv, c_.count, c_.dtype, cs); break;
        case Collective::kReduceScatter: w = comm.ReduceScatter(dsend, drecv, c_.count, c_.dtype, c_.op, cs); break;
        case Collective::kGather: w = comm.Gather(dsend, drecv, c_.count, c_.dtype, c_.root, cs); break;
        case Collective::kScatter: w = comm.Scatter(dsend, drecv, c_.count, c_.dtype, c_.root, cs); break;
        case Collective::kAllToAll: w = comm.AllToAll(dsend, drecv, c_.count, c_.dtype, cs); break;
        case Collective::kBarrier: w = comm.Barrier(cs); break;
      }
      if (after) st = after(c_, dsend, drecv, stream);
      Status ws = w.Wait();
      if (st.ok()) st = ws;
      Status ss = cu::Synchronize(stream);
      if (st.ok()) st = ss;
    }
  }
  if (st.ok()) st = cu::CopyToHost(hin, d_in, in_.bytes());
  if (st.ok()) st = cu::CopyToHost(hout, d_out, out_.bytes());
  return Fail(st);
}

Status ApiCall::Fail(const Status& st) const {
  if (st.ok()) return st;
  return st.WithContext("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " " + c_.Describe());
}

Status ApiCall::Check() const {
  const size_t bytes = c_.count * DataTypeSize(c_.dtype);
  const int n = size_;
  const bool root = rank_ == c_.root;
  if (c_.count == 0) return Status::Ok();
  // Outputs.
  switch (c_.kind) {
    case Collective::kAllReduce:
      CHORUS_RETURN_IF_ERROR(Fail(CheckReduction(c_.dtype, c_.op, c_.seed, n, 0, c_.count, recv_)));
      break;
    case Collective::kReduce:
      if (root) CHORUS_RETURN_IF_ERROR(Fail(CheckReduction(c_.dtype, c_.op, c_.seed, n, 0, c_.count, recv_)));
      break;
    case Collective::kReduceScatter:
      CHORUS_RETURN_IF_ERROR(Fail(CheckReduction(c_.dtype, c_.op, c_.seed, n, rank_ * c_.count, c_.count, recv_)));
      break;
    case Collective::kBroadcast: CHORUS_RETURN_IF_ERROR(Fail(CheckBytes(c_.seed, c_.root, 0, bytes, recv_))); break;
    case Collective::kAllGather:
    case Collective::kGather:
      if (c_.kind == Collective::kGather && !root) break;
      for (int j = 0; j < n; ++j) {
        CHORUS_RETURN_IF_ERROR(Fail(CheckBytes(c_.seed, j, 0, bytes, static_cast<const char*>(recv_) + j * bytes)
                                        .WithContext("block " + std::to_string(j))));
      }
      break;
    case Collective::kScatter:
      CHORUS_RETURN_IF_ERROR(Fail(CheckBytes(c_.seed, c_.root, rank_ * bytes, bytes, recv_)));
      break;
    case Collective::kAllToAll:
      for (int j = 0; j < n; ++j) {
        // Block j came from rank j, which sent us block `rank` of its buffer.
        CHORUS_RETURN_IF_ERROR(
            Fail(CheckBytes(c_.seed, j, rank_ * bytes, bytes, static_cast<const char*>(recv_) + j * bytes)
                     .WithContext("block " + std::to_string(j))));
      }
      break;
    case Collective::kBarrier: break;
  }
  // Send buffers are const: out of place, they still hold the inputs.
  const bool shared = recv_ == in_.data() || (c_.in_place && root) ||
                      (c_.in_place && (c_.kind == Collective::kReduceScatter || c_.kind == Collective::kAllGather));
  if (shared || in_.count() == 0) return Status::Ok();
  switch (c_.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kReduceScatter: {
      TypedBuffer want(c_.dtype, in_.count());
      FillReductionInput(c_.dtype, c_.op, c_.seed, rank_, 0, in_.count(), want.data());
      return Fail(CheckSameBytes(in_.data(), want.data(), in_.bytes()).WithContext("send buffer"));
    }
    case Collective::kAllGather:
    case Collective::kGather:
    case Collective::kAllToAll:
      return Fail(CheckBytes(c_.seed, rank_, 0, in_.bytes(), in_.data()).WithContext("send buffer"));
    case Collective::kScatter:
      return Fail(CheckBytes(c_.seed, c_.root, 0, in_.bytes(), in_.data()).WithContext("send buffer"));
    default: return Status::Ok();
  }
}

std::vector<ApiCase> RotatingCases(int n, uint64_t salt, int how_many, size_t big) {
  static constexpr Collective kKinds[] = {Collective::kAllReduce, Collective::kBroadcast,     Collective::kReduce,
                                          Collective::kAllGather, Collective::kReduceScatter, Collective::kGather,
                                          Collective::kScatter,   Collective::kAllToAll,      Collective::kBarrier};
  static constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                        DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kInt64};
  static constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  std::vector<size_t> counts = {1, 7, static_cast<size_t>(n - 1), 1023, 0, 4099};
  if (big > 0) counts.push_back(big);
  std::vector<ApiCase> cases;
  for (int i = 0; i < how_many; ++i) {
    ApiCase c;
    c.kind = kKinds[i % 9];
    c.dtype = kTypes[(3 * i + i / 9) % 8];
    c.op = kOps[(i + i / 9) % 5];
    c.count = c.kind == Collective::kBarrier ? 0 : counts[static_cast<size_t>(i + i / 9) % counts.size()];
    c.in_place = c.kind != Collective::kBroadcast && (i + i / 9) % 2 == 1;
    c.root = n - 1 - (i / 9) % n;
    c.seed = SeedOf({salt, static_cast<uint64_t>(n), static_cast<uint64_t>(i)});
    cases.push_back(c);
  }
  return cases;
}

}  // namespace chorus::testing
