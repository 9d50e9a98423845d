#include "tools/perf/mpi_backend.h"

// Debian: /usr/include/x86_64-linux-gnu/mpi -> Open MPI's include directory.
#include <mpi/mpi.h>

#include <cstring>
#include <vector>

namespace chorus {
namespace perf {
namespace {

bool MpiType(DataType t, MPI_Datatype* out) {
  switch (t) {
    case DataType::kFloat32: *out = MPI_FLOAT; return true;
    case DataType::kFloat64: *out = MPI_DOUBLE; return true;
    case DataType::kInt8: *out = MPI_INT8_T; return true;
    case DataType::kUint8: *out = MPI_UINT8_T; return true;
    case DataType::kInt32: *out = MPI_INT32_T; return true;
    case DataType::kInt64: *out = MPI_INT64_T; return true;
    case DataType::kFloat16:
    case DataType::kBFloat16: return false;
  }
  return false;
}

bool MpiOp(ReduceOp op, MPI_Op* out) {
  switch (op) {
    case ReduceOp::kSum: *out = MPI_SUM; return true;
    case ReduceOp::kProd: *out = MPI_PROD; return true;
    case ReduceOp::kMax: *out = MPI_MAX; return true;
    case ReduceOp::kMin: *out = MPI_MIN; return true;
    case ReduceOp::kAvg: return false;
  }
  return false;
}

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return PeerFailed(std::string("MPI ") + what + " failed: " + msg);
}

class MpiBackend : public Backend {
 public:
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialized_here_ && !finalized) MPI_Finalize();
  }

  Status Init(const BackendOptions& o) override {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      CHORUS_RETURN_IF_ERROR(Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided), "MPI_Init"));
      initialized_here_ = true;
    }
    // Errors come back as codes (turned into a Status) instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (o.world_size > 0 && o.world_size != size_) {
      return InvalidArgument("WORLD_SIZE=" + std::to_string(o.world_size) + " but MPI has " + std::to_string(size_) +
                             " ranks; with --backend mpi launch through mpirun -np N");
    }
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(version, &len);
    version_ = version;
    const size_t nl = version_.find_first_of("\n,");
    if (nl != std::string::npos) version_ = version_.substr(0, nl);
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  std::string algo() const override { return "library default"; }
  std::string description() const override { return version_; }

  Status Supports(Collective coll, DataType dtype, ReduceOp op) const override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL;
    if (coll != Collective::kBarrier && !MpiType(dtype, &t)) {
      return Unavailable(std::string("plain MPI has no ") + DataTypeName(dtype) + " type; use another --datatype");
    }
    if (HasReduceOp(coll) && !MpiOp(op, &o)) return Unavailable("MPI has no avg reduction (sum, prod, max, min only)");
    return Status::Ok();
  }

  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL;
    CHORUS_RETURN_IF_ERROR(Types(dtype, op, &t, &o));
    return Check(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, Count(count), t, o, MPI_COMM_WORLD),
                 "MPI_Allreduce");
  }

  Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    if (rank_ == root && send != recv) std::memcpy(recv, send, count * DataTypeSize(dtype));
    return Check(MPI_Bcast(recv, Count(count), t, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL;
    CHORUS_RETURN_IF_ERROR(Types(dtype, op, &t, &o));
    // MPI_IN_PLACE is only valid on the root; elsewhere the send buffer is the input.
    const void* in = (rank_ == root && send == recv) ? MPI_IN_PLACE : send;
    return Check(MPI_Reduce(in, recv, Count(count), t, o, root, MPI_COMM_WORLD), "MPI_Reduce");
  }

  Status AllGather(const void* send, void* recv, size_t count, DataType dtype) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    const bool in_place = send == static_cast<const char*>(recv) + rank_ * count * DataTypeSize(dtype);
    return Check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, Count(count), t, recv, Count(count), t, MPI_COMM_WORLD),
                 "MPI_Allgather");
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL;
    CHORUS_RETURN_IF_ERROR(Types(dtype, op, &t, &o));
    const size_t elt = DataTypeSize(dtype);
    if (recv == static_cast<const char*>(send) + rank_ * count * elt) {
      // MPI's in-place form reduces in the full buffer and leaves the block at its start;
      // nccl's layout wants it at this rank's offset.
      void* full = const_cast<void*>(send);
      CHORUS_RETURN_IF_ERROR(Check(MPI_Reduce_scatter_block(MPI_IN_PLACE, full, Count(count), t, o, MPI_COMM_WORLD),
                                   "MPI_Reduce_scatter_block"));
      if (rank_ != 0) std::memmove(recv, full, count * elt);
      return Status::Ok();
    }
    return Check(MPI_Reduce_scatter_block(send, recv, Count(count), t, o, MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
  }

  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    return Check(
        MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, Count(count), t, recv, Count(count), t, MPI_COMM_WORLD),
        "MPI_Alltoall");
  }

  Status SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DataType dtype) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    if (send == recv) {
      return Check(
          MPI_Sendrecv_replace(recv, Count(count), t, send_peer, 0, recv_peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Sendrecv_replace");
    }
    return Check(MPI_Sendrecv(send, Count(count), t, send_peer, 0, recv, Count(count), t, recv_peer, 0, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE),
                 "MPI_Sendrecv");
  }

  Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    const bool in_place = rank_ == root && send == static_cast<const char*>(recv) + root * count * DataTypeSize(dtype);
    return Check(
        MPI_Gather(in_place ? MPI_IN_PLACE : send, Count(count), t, recv, Count(count), t, root, MPI_COMM_WORLD),
        "MPI_Gather");
  }

  Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHORUS_RETURN_IF_ERROR(Type(dtype, &t));
    const bool in_place = rank_ == root && recv == static_cast<const char*>(send) + root * count * DataTypeSize(dtype);
    return Check(
        MPI_Scatter(send, Count(count), t, in_place ? MPI_IN_PLACE : recv, Count(count), t, root, MPI_COMM_WORLD),
        "MPI_Scatter");
  }

  Status Barrier() override { return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  Result<double> AllReduceMaxDouble(double value) override {
    double out = 0;
    CHORUS_RETURN_IF_ERROR(Check(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce"));
    return out;
  }
  Result<double> AllReduceSumDouble(double value) override {
    double out = 0;
    CHORUS_RETURN_IF_ERROR(Check(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce"));
    return out;
  }

 private:
  static int Count(size_t n) { return static_cast<int>(n); }  // the harness stays below 2^31 elements

  Status Type(DataType dtype, MPI_Datatype* t) const {
    if (!MpiType(dtype, t)) return Unavailable(std::string("plain MPI has no ") + DataTypeName(dtype) + " type");
    return Status::Ok();
  }
  Status Types(DataType dtype, ReduceOp op, MPI_Datatype* t, MPI_Op* o) const {
    CHORUS_RETURN_IF_ERROR(Type(dtype, t));
    if (!MpiOp(op, o)) return Unavailable("MPI has no avg reduction");
    return Status::Ok();
  }

  bool initialized_here_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::string version_;
};

// NOLINTNEXTLINE(cert-err58-cpp): a throw while registering ends the program, as it should
[[maybe_unused]] const bool kRegistered = RegisterBackend("mpi", [] { return MakeMpiBackend(); });

}  // namespace

std::unique_ptr<Backend> MakeMpiBackend() { return std::make_unique<MpiBackend>(); }

}  // namespace perf
}  // namespace chorus
