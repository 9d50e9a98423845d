// The interface chorus_perf drives. One implementation per library measured (gloo,
// mpi; chorus is plugged in by registering a factory, see RegisterBackend). All calls
// are blocking, on host buffers, with NCCL's argument conventions:
//
//   AllReduce     send, recv: count elements each.
//   Broadcast     send (read on root only) -> recv on every rank: count elements.
//   Reduce        send: count; recv: count, significant on root only.
//   AllGather     send: count; recv: nranks*count, block r from rank r.
//                 In place when send == recv + rank*count.
//   ReduceScatter send: nranks*count; recv: count, block `rank` of the reduction.
//                 In place when recv == send + rank*count.
//   AllToAll      send, recv: nranks*count; block p of send goes to rank p, block q of
//                 recv comes from rank q. In place when send == recv.
//   SendRecv      send count elements to send_peer and receive count from recv_peer.
//   Gather        send: count; recv (root only): nranks*count, block q from rank q.
//                 In place on root when send == recv + root*count.
//   Scatter       send (root only): nranks*count; recv: count, block r of root's send.
//                 In place on root when recv == send + root*count.
//
// A backend that lacks a collective, dtype or op returns kUnavailable (or
// kInvalidArgument) naming the backend and what is missing; it never aborts.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "tools/perf/collectives.h"

namespace chorus {
namespace perf {

// Where and how to meet the other ranks. For chorus and gloo rank/world_size/master come
// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's names); MPI ignores them
// and takes rank and size from MPI itself.
struct BackendOptions {
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = 0;
  std::string socket_ifname;  // CHORUS_SOCKET_IFNAME: interface to bind data sockets to
  std::string algo;           // backend-specific variant; empty = the backend's default
  std::string store;          // gloo: "" = TCP store at MASTER_ADDR:MASTER_PORT, else a FileStore dir
  std::string nccl_lib;       // nccl: what to dlopen ("" = libnccl.so.2)
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // per operation
  // Device buffers in stream order (--device without --blocking): a collective on device
  // buffers may return once enqueued on the backend's stream; Flush() waits for them.
  bool stream_order = false;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Joins the group. Called once, before anything else.
  virtual Status Init(const BackendOptions& options) = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "gloo", "mpi", "chorus"
  // What variant runs, for the header (e.g. "ring (gloo::allreduce RING)").
  virtual std::string algo() const = 0;
  // Library version or other facts worth a header line; may be empty.
  virtual std::string description() const { return ""; }
  // What the library counted so far that explains its times (a footer line); may be empty.
  virtual std::string diagnostics() const { return ""; }
  // Which algorithm the library picks for a call of `count` (as passed) and why (a
  // footer line per size); may be empty.
  virtual std::string explain(Collective /*coll*/, size_t /*count*/, DataType /*dtype*/) const { return ""; }
  // Device buffers (--device): whether the collectives take CUDA device pointers, and
  // whether they take nothing else (NCCL). The runner then fills and checks host copies
  // and moves them to and from the device outside the timed loop.
  virtual bool accepts_device_buffers() const { return false; }
  virtual bool requires_device_buffers() const { return false; }
  // Waits for every call enqueued since the last Flush (BackendOptions::stream_order)
  // and returns the first error among them. The runner calls it after each loop of calls
  // on device buffers, inside the timing, and before it reads results.
  virtual Status Flush() { return Status::Ok(); }

  // Checked before a sweep so that an unsupported combination fails with one clear
  // message instead of mid-sweep. Called before Init as well (it must not need the
  // group), and again after it. The default accepts everything.
  virtual Status Supports(Collective coll, DataType dtype, ReduceOp op) const {
    (void)coll;
    (void)dtype;
    (void)op;
    return Status::Ok();
  }

  virtual Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  virtual Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  virtual Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  virtual Status AllGather(const void* send, void* recv, size_t count, DataType dtype);
  virtual Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  virtual Status AllToAll(const void* send, void* recv, size_t count, DataType dtype);
  virtual Status SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DataType dtype);
  virtual Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root);
  virtual Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  virtual Status Barrier() = 0;

  // Scalar all-reduces used by the harness itself: the maximum of the per-rank times
  // and the sum of the per-rank wrong-element counts (exact below 2^53).
  virtual Result<double> AllReduceMaxDouble(double value) = 0;
  virtual Result<double> AllReduceSumDouble(double value) = 0;

 protected:
  // The default for the collectives a backend does not override.
  Status NotImplemented(const char* what) const;
};

// Dispatches one collective call; `peer` arguments of SendRecv are derived from the
// rank (send to rank+1, receive from rank-1, as nccl-tests' sendrecv).
struct CallArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};
Status RunCollective(Backend& backend, Collective coll, const CallArgs& args);

// A registry so that a backend is added by linking its library (alwayslink) without
// touching the harness: REGISTER at static-initialization time.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;
bool RegisterBackend(const std::string& name, BackendFactory factory);
Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name);
std::vector<std::string> RegisteredBackends();

}  // namespace perf
}  // namespace chorus
