// NCCL's C API over chorus::Communicator (docs/design/nccl_api.md). Host buffers run on
// chorus's host path and complete before the call (or ncclGroupEnd) returns; device
// buffers go through chorus's stream forms, which enqueue and return.
#include <unistd.h>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/config.h"
#include "common/log.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/stream_ops.h"
#include "nccl/nccl.h"
#include "nccl/scale.h"
#include "nccl/unique_id.h"
#include "rendezvous/net_util.h"
#include "rendezvous/store_server.h"

using chorus::DataType;
using chorus::ReduceOp;
using chorus::Status;
using chorus::StatusCode;
using chorus::Work;

namespace {

// A PreMulSum op made by ncclRedOpCreatePreMulSum: SUM of inputs scaled by `scalar`.
struct PreMulOp {
  ncclDataType_t dtype;
  std::array<char, 8> scalar;  // one element of dtype
};

}  // namespace

struct ncclComm {
  std::unique_ptr<chorus::Communicator> c;
  // The store of the id this communicator came from, where this process hosts it.
  std::shared_ptr<chorus::rendezvous::StoreServer> store;
  int device = -1;
  bool finalized = false;
  bool aborted = false;
  std::mutex mu;              // guards what follows: ncclCommGetAsyncError may come from another thread
  std::vector<Work> pending;  // device-buffer operations not yet seen to end
  ncclResult_t async_error = ncclSuccess;
  std::map<int, PreMulOp> premul;
  int next_op = ncclNumOps;
};

namespace {

thread_local std::string g_last_error;

ncclResult_t Fail(ncclResult_t r, const std::string& why) {
  g_last_error = why;
  return r;
}

ncclResult_t FromStatus(const Status& s) {
  if (s.ok()) return ncclSuccess;
  ncclResult_t r = ncclSystemError;
  switch (s.code()) {
    case StatusCode::kOk: return ncclSuccess;
    case StatusCode::kInvalidArgument: r = ncclInvalidArgument; break;
    case StatusCode::kMismatch:
    case StatusCode::kAborted: r = ncclInvalidUsage; break;
    case StatusCode::kPeerFailed:
    case StatusCode::kProtocolError: r = ncclRemoteError; break;
    case StatusCode::kInternal: r = ncclInternalError; break;
    case StatusCode::kTimeout:
    case StatusCode::kIoError:
    case StatusCode::kUnavailable: r = ncclSystemError; break;
  }
  return Fail(r, s.ToString());
}

// Stores that ncclGetUniqueId started, by nonce, until a communicator made from that id
// in the same process takes them over. A forked child inherits the entries but not the
// stores' threads: it leaves them alone (never destroyed: the map is never freed).
struct HostedStore {
  pid_t pid;
  std::shared_ptr<chorus::rendezvous::StoreServer> server;
};
std::mutex g_stores_mu;
std::map<chorus::Nonce, HostedStore>& Stores() {
  static auto* stores = new std::map<chorus::Nonce, HostedStore>();
  return *stores;
}

const char* NcclTypeName(int t) {
  static const char* const kNames[] = {"ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                       "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return t >= 0 && t < ncclNumTypes ? kNames[t] : "invalid";
}

// chorus's type for an NCCL type; unsigned 32/64-bit ride on the signed type (same bits
// for SUM/PROD; ResolveOp refuses the ops where the bits differ).
bool MapType(ncclDataType_t t, DataType* out) {
  switch (t) {
    case ncclInt8: *out = DataType::kInt8; return true;
    case ncclUint8: *out = DataType::kUint8; return true;
    case ncclInt32:
    case ncclUint32: *out = DataType::kInt32; return true;
    case ncclInt64:
    case ncclUint64: *out = DataType::kInt64; return true;
    case ncclFloat16: *out = DataType::kFloat16; return true;
    case ncclFloat32: *out = DataType::kFloat32; return true;
    case ncclFloat64: *out = DataType::kFloat64; return true;
    case ncclBfloat16: *out = DataType::kBFloat16; return true;
    default: return false;
  }
}

std::string Where(const ncclComm* comm, const char* call) {
  return std::string(call) + " (rank " + std::to_string(comm->c->rank()) + " of " + std::to_string(comm->c->size()) +
         ")";
}

#define NCCL_TRY(expr)                \
  do {                                \
    ncclResult_t _r = (expr);         \
    if (_r != ncclSuccess) return _r; \
  } while (0)

ncclResult_t CheckComm(const ncclComm* comm, const char* call) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  if (comm->aborted) return Fail(ncclInvalidUsage, Where(comm, call) + ": communicator was aborted");
  if (comm->finalized) return Fail(ncclInvalidUsage, Where(comm, call) + ": communicator was finalized");
  return ncclSuccess;
}

ncclResult_t CheckType(const ncclComm* comm, const char* call, ncclDataType_t t, DataType* out) {
  if (!MapType(t, out)) return Fail(ncclInvalidArgument, Where(comm, call) + ": invalid datatype " + std::to_string(t));
  return ncclSuccess;
}

// The chorus op for an NCCL op, and the PreMulSum it names (null for the built-in ones).
ncclResult_t ResolveOp(ncclComm* comm, const char* call, ncclDataType_t t, ncclRedOp_t op, ReduceOp* out,
                       const PreMulOp** premul) {
  *premul = nullptr;
  if (op >= ncclNumOps) {
    std::lock_guard<std::mutex> lock(comm->mu);
    auto it = comm->premul.find(op);
    if (it == comm->premul.end()) {
      return Fail(ncclInvalidArgument, Where(comm, call) + ": invalid reduction op " + std::to_string(op));
    }
    if (it->second.dtype != t) {
      return Fail(ncclInvalidArgument, Where(comm, call) + ": PreMulSum op " + std::to_string(op) + " was made for " +
                                           NcclTypeName(it->second.dtype) + ", used with " + NcclTypeName(t));
    }
    *premul = &it->second;
    *out = ReduceOp::kSum;
    return ncclSuccess;
  }
  if (op < 0) return Fail(ncclInvalidArgument, Where(comm, call) + ": invalid reduction op " + std::to_string(op));
  static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  *out = kOps[op];
  const bool unsigned_wide = t == ncclUint32 || t == ncclUint64;
  if (unsigned_wide && op != ncclSum && op != ncclProd) {
    return Fail(ncclInvalidArgument, Where(comm, call) + ": " + NcclTypeName(t) + " with op " +
                                         chorus::ReduceOpName(*out) + " is not supported (only sum and prod)");
  }
  return ncclSuccess;
}

// Whether the call's buffers are host memory (the chorus extension) or device memory;
// a mix is an error.
ncclResult_t BufferKind(const ncclComm* comm, const char* call, std::initializer_list<const void*> bufs, bool* host) {
  int n_host = 0;
  int n_dev = 0;
  for (const void* b : bufs) {
    if (b == nullptr) continue;
    if (chorus::kernels::cuda::PointerKind(b) == chorus::kernels::cuda::MemoryKind::kHost) {
      ++n_host;
    } else {
      ++n_dev;
    }
  }
  if (n_host > 0 && n_dev > 0) {
    return Fail(ncclInvalidArgument, Where(comm, call) + ": host and device buffers mixed in one call");
  }
  *host = n_dev == 0;
  return ncclSuccess;
}

// NCCL refuses null buffers where the call reads or writes them.
ncclResult_t NonNull(const ncclComm* comm, const char* call, const void* p, const char* name) {
  if (p == nullptr) return Fail(ncclInvalidArgument, Where(comm, call) + ": " + name + " is NULL");
  return ncclSuccess;
}

// NCCL refuses a root or peer outside the communicator.
ncclResult_t RankInRange(const ncclComm* comm, const char* call, const char* what, int r) {
  if (r < 0 || r >= comm->c->size()) {
    return Fail(ncclInvalidArgument, Where(comm, call) + ": " + what + " " + std::to_string(r) + " is out of range");
  }
  return ncclSuccess;
}

// Which of a call's buffers NCCL refuses as NULL.
enum class Needs { kBoth, kSend, kRecv };

// What a collective's checks resolve: chorus's type, its op and PreMulSum (reducing
// calls only), and whether the buffers are host memory (the chorus extension).
struct Checked {
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  const PreMulOp* premul = nullptr;
  bool host = true;
};

// The checks every collective makes before it is queued, in NCCL's order: the
// communicator, NULL buffers, the type, the op (`op` null: the call does not reduce),
// and host against device buffers.
ncclResult_t CheckCall(ncclComm* comm, const char* call, const void* send, const void* recv, Needs needs,
                       ncclDataType_t datatype, const ncclRedOp_t* op, Checked* out) {
  NCCL_TRY(CheckComm(comm, call));
  if (needs != Needs::kRecv) NCCL_TRY(NonNull(comm, call, send, "sendbuff"));
  if (needs != Needs::kSend) NCCL_TRY(NonNull(comm, call, recv, "recvbuff"));
  NCCL_TRY(CheckType(comm, call, datatype, &out->type));
  if (op != nullptr) NCCL_TRY(ResolveOp(comm, call, datatype, *op, &out->op, &out->premul));
  return BufferKind(comm, call, {send, recv}, &out->host);
}

// One operation of a group: `issue` starts it (an I-form on host buffers, a stream form on
// device buffers) and returns its Work.
struct GroupOp {
  ncclComm* comm = nullptr;
  bool host = true;
  std::function<Work()> issue;
  std::vector<std::shared_ptr<std::vector<char>>> scratch;  // kept alive until the op ends
};

struct GroupState {
  int depth = 0;
  std::vector<GroupOp> ops;
};
thread_local GroupState g_group;

// Drops the device operations that ended, keeping the first error for
// ncclCommGetAsyncError. Caller holds comm->mu.
void ReapLocked(ncclComm* comm) {
  std::vector<Work> still;
  for (Work& w : comm->pending) {
    if (!w.Test()) {
      still.push_back(w);
      continue;
    }
    Status s = w.Wait();
    if (!s.ok() && comm->async_error == ncclSuccess) comm->async_error = FromStatus(s);
  }
  comm->pending.swap(still);
}

// Issues every op, then waits for the host ones: all sends and receives are posted before
// any is waited, so grouped point-to-point patterns cannot deadlock.
ncclResult_t RunOps(std::vector<GroupOp> ops) {
  std::vector<Work> works;
  works.reserve(ops.size());
  for (GroupOp& op : ops) works.push_back(op.issue());
  ncclResult_t result = ncclSuccess;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].host) {
      Status s = works[i].Wait();
      if (!s.ok() && result == ncclSuccess) result = FromStatus(s);
    } else if (works[i].Test()) {
      // Refused at the call (arguments, no CUDA device): say so now, as NCCL does.
      Status s = works[i].Wait();
      if (!s.ok() && result == ncclSuccess) result = FromStatus(s);
    } else {
      std::lock_guard<std::mutex> lock(ops[i].comm->mu);
      ReapLocked(ops[i].comm);
      ops[i].comm->pending.push_back(works[i]);
    }
  }
  return result;
}

ncclResult_t Submit(GroupOp op) {
  if (g_group.depth > 0) {
    g_group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<GroupOp> one;
  one.push_back(std::move(op));
  return RunOps(std::move(one));
}

ncclResult_t InitRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (out == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *out = nullptr;
  if (nranks < 1) return Fail(ncclInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is out of range for nranks " +
                                         std::to_string(nranks));
  }
  std::array<char, chorus::nccl::kIdBytes> bytes{};
  std::memcpy(bytes.data(), id.internal, bytes.size());
  chorus::Result<chorus::nccl::IdContents> c = chorus::nccl::DecodeId(bytes);
  if (!c.ok())
    return Fail(ncclInvalidArgument, "ncclCommInitRank (rank " + std::to_string(rank) + "): " + c.status().message());
  chorus::Options options;
  options.init_method = "tcp://" +
                        (c.value().host.find(':') != std::string::npos ? "[" + c.value().host + "]" : c.value().host) +
                        ":" + std::to_string(c.value().port);
  options.rank = rank;
  options.world_size = nranks;
  auto comm = std::make_unique<ncclComm>();
  chorus::Result<std::unique_ptr<chorus::Communicator>> created = chorus::Communicator::Create(options);
  if (!created.ok()) {
    return FromStatus(created.status().WithContext("ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                                                   std::to_string(nranks) + ")"));
  }
  comm->c = std::move(created.value());
  {
    // Every rank has met in the store: the communicator now holds the store, if it is here.
    std::lock_guard<std::mutex> lock(g_stores_mu);
    auto it = Stores().find(c.value().nonce);
    if (it != Stores().end() && it->second.pid == getpid()) {
      comm->store = it->second.server;
      Stores().erase(it);
    }
  }
  chorus::Result<int> dev = chorus::kernels::cuda::CurrentDeviceIndex();
  comm->device = dev.ok() ? dev.value() : -1;
  *out = comm.release();
  return ncclSuccess;
}

// Host PreMulSum: the op reads a scaled copy of the input (in `g`'s scratch), reduced
// with SUM. Device buffers are refused.
ncclResult_t ApplyPreMul(const ncclComm* comm, const char* call, const PreMulOp& op, size_t count, const void** send,
                         GroupOp* g) {
  if (!g->host) return Fail(ncclInvalidArgument, Where(comm, call) + ": PreMulSum on device buffers is not supported");
  DataType t = DataType::kUint8;
  if (!MapType(op.dtype, &t)) return Fail(ncclInternalError, Where(comm, call) + ": PreMulSum op of an unknown type");
  auto buf = std::make_shared<std::vector<char>>(count * chorus::DataTypeSize(t));
  std::memcpy(buf->data(), *send, buf->size());
  Status s = chorus::nccl::ScaleInPlace(op.dtype, buf->data(), count, op.scalar.data());
  if (!s.ok()) return FromStatus(s.WithContext(Where(comm, call)));
  *send = buf->data();
  g->scratch.push_back(std::move(buf));
  return ncclSuccess;
}

void* StreamOf(cudaStream_t s) { return static_cast<void*>(s); }

// The address a unique id carries, chosen as the TCP transport chooses its own without a
// master address: CHORUS_SOCKET_IFNAME's interface, else the first non-loopback IPv4 that
// is up, else loopback (said in a warning: only ranks on this host can reach it).
chorus::Result<std::string> IdHost() {
  const std::string& filter = chorus::Config::Process().socket_ifname;
  chorus::Result<std::string> host = chorus::rendezvous::SelectInterfaceAddress(filter, "");
  if (!host.ok()) return host.status().WithContext("ncclGetUniqueId: CHORUS_SOCKET_IFNAME='" + filter + "'");
  if (filter.empty() && host.value().rfind("127.", 0) == 0) {
    CHORUS_WARN("ncclGetUniqueId: no non-loopback IPv4 interface is up; the id carries "
                << host.value() << ", which only ranks on this host can reach");
  }
  return host;
}

// ncclSend (is_send) and ncclRecv.
ncclResult_t PointToPoint(const char* call, bool is_send, void* buf, size_t count, ncclDataType_t datatype, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  Checked k;
  NCCL_TRY(CheckCall(comm, call, is_send ? buf : nullptr, is_send ? nullptr : buf,
                     is_send ? Needs::kSend : Needs::kRecv, datatype, nullptr, &k));
  NCCL_TRY(RankInRange(comm, call, "peer", peer));
  if (count == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  const size_t bytes = count * chorus::DataTypeSize(k.type);
  const bool host = k.host;
  void* s = StreamOf(stream);
  g.issue = [=] {
    if (is_send) return host ? c->ISend(buf, bytes, peer) : c->Send(buf, bytes, peer, chorus::CudaStream{s});
    return host ? c->IRecv(buf, bytes, peer) : c->Recv(buf, bytes, peer, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return Fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (network, timeout or I/O)";
    case ncclInternalError: return "internal error - please report this issue to chorus";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) { return g_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  const Status& config_status = chorus::Config::ProcessConfigStatus();
  if (!config_status.ok()) return FromStatus(config_status.WithContext("ncclGetUniqueId"));
  chorus::Result<chorus::Nonce> nonce = chorus::NewNonce();
  if (!nonce.ok()) return FromStatus(nonce.status().WithContext("ncclGetUniqueId"));
  chorus::Result<std::string> host = IdHost();
  if (!host.ok()) return FromStatus(host.status());
  chorus::Result<std::unique_ptr<chorus::rendezvous::StoreServer>> server = chorus::rendezvous::StoreServer::Start(
      chorus::rendezvous::StoreBindAddress(host.value(), chorus::rendezvous::ListInterfaces()), 0,
      chorus::Config::Process().secret);
  if (!server.ok()) return FromStatus(server.status().WithContext("ncclGetUniqueId starting the store"));
  chorus::nccl::IdContents c;
  c.host = host.value();
  c.port = server.value()->port();
  c.nonce = nonce.value();
  std::array<char, chorus::nccl::kIdBytes> bytes{};
  Status s = chorus::nccl::EncodeId(c, &bytes);
  if (!s.ok()) return FromStatus(s);
  {
    std::lock_guard<std::mutex> lock(g_stores_mu);
    Stores()[c.nonce] = HostedStore{getpid(), std::move(server.value())};
  }
  std::memcpy(unique_id->internal, bytes.data(), bytes.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return InitRank(comm, nranks, comm_id, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (config != nullptr && config->magic != 0xcafebeef) {
    return Fail(ncclInvalidArgument, "ncclCommInitRankConfig (rank " + std::to_string(rank) +
                                         "): config was not set up with NCCL_CONFIG_INITIALIZER");
  }
  // Blocking or not, initialisation completes here (ncclSuccess is valid for both).
  return InitRank(comm, nranks, comm_id, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* /*devlist*/) {
  if (comms == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
  if (ndev < 1) return Fail(ncclInvalidArgument, "ncclCommInitAll: ndev " + std::to_string(ndev) + " < 1");
  ncclUniqueId id;
  ncclResult_t r = pncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  // One thread per rank, since ncclCommInitRank blocks until every rank has joined.
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::string> errors(ndev);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    threads.emplace_back([&, i] {
      results[i] = InitRank(&comms[i], ndev, id, i);
      errors[i] = g_last_error;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < ndev; ++i) {
    if (results[i] != ncclSuccess) {
      for (int j = 0; j < ndev; ++j) {
        if (comms[j] != nullptr) pncclCommAbort(comms[j]);
        comms[j] = nullptr;
      }
      return Fail(results[i], "ncclCommInitAll: " + errors[i]);
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclResult_t r = CheckComm(comm, "ncclCommFinalize");
  if (r != ncclSuccess) return r;
  std::vector<Work> pending;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    pending.swap(comm->pending);
  }
  ncclResult_t result = ncclSuccess;
  for (Work& w : pending) {
    Status s = w.Wait();
    if (!s.ok() && result == ncclSuccess) result = FromStatus(s);
  }
  Status s = comm->c->Shutdown();
  comm->finalized = true;
  if (!s.ok() && result == ncclSuccess) result = FromStatus(s.WithContext("ncclCommFinalize"));
  return result;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
  ncclResult_t r = ncclSuccess;
  if (!comm->finalized && !comm->aborted) r = pncclCommFinalize(comm);
  delete comm;
  return r;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommAbort: comm is NULL");
  comm->aborted = true;
  comm->c->Abort("ncclCommAbort on rank " + std::to_string(comm->c->rank()));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
  if (async_error == nullptr) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  std::lock_guard<std::mutex> lock(comm->mu);
  ReapLocked(comm);
  *async_error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return Fail(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->c->size();
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) {
    return Fail(ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
  }
  *device = comm->device;  // -1 without a CUDA device
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return Fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->c->rank();
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* /*config*/) {
  ncclResult_t r = CheckComm(comm, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  if (newcomm == nullptr) return Fail(ncclInvalidArgument, Where(comm, "ncclCommSplit") + ": newcomm is NULL");
  if (color < NCCL_SPLIT_NOCOLOR) {
    return Fail(ncclInvalidArgument, Where(comm, "ncclCommSplit") + ": color " + std::to_string(color) +
                                         " is negative (NCCL_SPLIT_NOCOLOR is -1)");
  }
  *newcomm = nullptr;
  chorus::Result<std::unique_ptr<chorus::Communicator>> child = comm->c->Split(color, key);
  if (!child.ok()) return FromStatus(child.status().WithContext(Where(comm, "ncclCommSplit")));
  if (!child.value()) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
  auto out = std::make_unique<ncclComm>();
  out->c = std::move(child.value());
  out->store = comm->store;
  out->device = comm->device;
  *newcomm = out.release();
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t r = CheckComm(comm, "ncclRedOpCreatePreMulSum");
  if (r != ncclSuccess) return r;
  DataType t;
  r = CheckType(comm, "ncclRedOpCreatePreMulSum", datatype, &t);
  if (r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr) {
    return Fail(ncclInvalidArgument, Where(comm, "ncclRedOpCreatePreMulSum") + ": op or scalar is NULL");
  }
  if (residence != ncclScalarHostImmediate &&
      chorus::kernels::cuda::PointerKind(scalar) != chorus::kernels::cuda::MemoryKind::kHost) {
    return Fail(ncclInvalidArgument,
                Where(comm, "ncclRedOpCreatePreMulSum") + ": a scalar in device memory is not supported by chorus");
  }
  PreMulOp p;
  p.dtype = datatype;
  p.scalar.fill(0);
  std::memcpy(p.scalar.data(), scalar, chorus::DataTypeSize(t));
  std::lock_guard<std::mutex> lock(comm->mu);
  const int id = comm->next_op++;
  comm->premul[id] = p;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  ncclResult_t r = CheckComm(comm, "ncclRedOpDestroy");
  if (r != ncclSuccess) return r;
  std::lock_guard<std::mutex> lock(comm->mu);
  if (comm->premul.erase(op) == 0) {
    return Fail(ncclInvalidArgument, Where(comm, "ncclRedOpDestroy") + ": op " + std::to_string(op) +
                                         " was not made by ncclRedOpCreatePreMulSum on this communicator");
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  ++g_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group.depth == 0) return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group.depth > 0) return ncclSuccess;
  std::vector<GroupOp> ops;
  ops.swap(g_group.ops);
  return RunOps(std::move(ops));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclAllReduce";
  Checked k;
  NCCL_TRY(CheckCall(comm, call, sendbuff, recvbuff, Needs::kBoth, datatype, &op, &k));
  if (count == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  if (k.premul != nullptr) NCCL_TRY(ApplyPreMul(comm, call, *k.premul, count, &sendbuff, &g));
  void* s = StreamOf(stream);
  g.issue = [=] {
    return k.host ? c->IAllReduce(sendbuff, recvbuff, count, k.type, k.op)
                  : c->AllReduce(sendbuff, recvbuff, count, k.type, k.op, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclReduceScatter";
  Checked k;
  NCCL_TRY(CheckCall(comm, call, sendbuff, recvbuff, Needs::kBoth, datatype, &op, &k));
  if (recvcount == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  if (k.premul != nullptr) NCCL_TRY(ApplyPreMul(comm, call, *k.premul, recvcount * c->size(), &sendbuff, &g));
  void* s = StreamOf(stream);
  g.issue = [=] {
    return k.host ? c->IReduceScatter(sendbuff, recvbuff, recvcount, k.type, k.op)
                  : c->ReduceScatter(sendbuff, recvbuff, recvcount, k.type, k.op, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclReduce";
  Checked k;
  NCCL_TRY(CheckCall(comm, call, sendbuff, recvbuff, Needs::kSend, datatype, &op, &k));
  NCCL_TRY(RankInRange(comm, call, "root", root));
  if (count == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  if (k.premul != nullptr) NCCL_TRY(ApplyPreMul(comm, call, *k.premul, count, &sendbuff, &g));
  if (recvbuff == nullptr) {
    if (c->rank() == root) return Fail(ncclInvalidArgument, Where(comm, call) + ": recvbuff is NULL on the root");
    if (k.host) {
      // Non-roots may pass no receive buffer; chorus's algorithms may use one as scratch.
      g.scratch.push_back(std::make_shared<std::vector<char>>(count * chorus::DataTypeSize(k.type)));
      recvbuff = g.scratch.back()->data();
    } else {
      recvbuff = const_cast<void*>(sendbuff);
    }
  }
  void* s = StreamOf(stream);
  g.issue = [=] {
    return k.host ? c->IReduce(sendbuff, recvbuff, count, k.type, k.op, root)
                  : c->Reduce(sendbuff, recvbuff, count, k.type, k.op, root, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclBroadcast";
  Checked k;
  NCCL_TRY(CheckCall(comm, call, sendbuff, recvbuff, Needs::kRecv, datatype, nullptr, &k));
  NCCL_TRY(RankInRange(comm, call, "root", root));
  if (count == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  void* s = StreamOf(stream);
  const bool copy = c->rank() == root && sendbuff != nullptr && sendbuff != recvbuff;
  const size_t bytes = count * chorus::DataTypeSize(k.type);
  g.issue = [=] {
    // Host buffers out of place: chorus's own form, which copies while it sends.
    if (k.host) return c->IBroadcast(copy ? sendbuff : recvbuff, recvbuff, count, k.type, root);
    // Device buffers: the root broadcasts from recvbuff after copying its input there.
    if (copy) {
      Status st = chorus::kernels::cuda::CopyAsync(recvbuff, sendbuff, bytes, s);
      if (!st.ok()) return Work::Failed(st);
    }
    return c->Broadcast(recvbuff, count, k.type, root, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclAllGather";
  Checked k;
  NCCL_TRY(CheckCall(comm, call, sendbuff, recvbuff, Needs::kBoth, datatype, nullptr, &k));
  if (sendcount == 0) return ncclSuccess;
  GroupOp g{comm, k.host};
  chorus::Communicator* c = comm->c.get();
  void* s = StreamOf(stream);
  g.issue = [=] {
    return k.host ? c->IAllGather(sendbuff, recvbuff, sendcount, k.type)
                  : c->AllGather(sendbuff, recvbuff, sendcount, k.type, chorus::CudaStream{s});
  };
  return Submit(std::move(g));
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return PointToPoint("ncclSend", true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return PointToPoint("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

// The profiling interface: pnccl<X> is a second name (an alias) for nccl<X>'s code. An
// alias rather than a forwarding call because a call to nccl<X> from inside the library
// binds to a profiler's interposed nccl<X>, which calls pnccl<X>: it would recurse.
// Calls inside the library use pnccl<X>, so a profiler's nccl<X> sees only the program's.
#define CHORUS_PNCCL(name) decltype(name) p##name __attribute__((alias(#name)));
CHORUS_PNCCL(ncclGetVersion)
CHORUS_PNCCL(ncclGetUniqueId)
CHORUS_PNCCL(ncclCommInitRankConfig)
CHORUS_PNCCL(ncclCommInitRank)
CHORUS_PNCCL(ncclCommInitAll)
CHORUS_PNCCL(ncclCommFinalize)
CHORUS_PNCCL(ncclCommDestroy)
CHORUS_PNCCL(ncclCommAbort)
CHORUS_PNCCL(ncclCommSplit)
CHORUS_PNCCL(ncclGetErrorString)
CHORUS_PNCCL(ncclGetLastError)
CHORUS_PNCCL(ncclCommGetAsyncError)
CHORUS_PNCCL(ncclCommCount)
CHORUS_PNCCL(ncclCommCuDevice)
CHORUS_PNCCL(ncclCommUserRank)
CHORUS_PNCCL(ncclRedOpCreatePreMulSum)
CHORUS_PNCCL(ncclRedOpDestroy)
CHORUS_PNCCL(ncclReduce)
CHORUS_PNCCL(ncclBcast)
CHORUS_PNCCL(ncclBroadcast)
CHORUS_PNCCL(ncclAllReduce)
CHORUS_PNCCL(ncclReduceScatter)
CHORUS_PNCCL(ncclAllGather)
CHORUS_PNCCL(ncclSend)
CHORUS_PNCCL(ncclRecv)
CHORUS_PNCCL(ncclGroupStart)
CHORUS_PNCCL(ncclGroupEnd)
#undef CHORUS_PNCCL

}  // extern "C"
