// The public API: a Communicator is a group of ranks that can exchange messages and
// run collectives. Create one from an init method the way torch.distributed users do
// ("env://" with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, "tcp://host:port",
// "file:///shared/path", or launcher variables from torchrun, SLURM, Open MPI, PBS).
//
//   auto comm = chorus::Communicator::Create();          // env://
//   if (!comm.ok()) { std::cerr << comm.status().ToString(); return 1; }
//   (*comm)->Send(buf, bytes, /*peer=*/1);
//
// Every call returns a Status; nothing blocks longer than the configured timeout
// (CHORUS_TIMEOUT, default 30 min). A failed peer turns into an error naming it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "chorus/config.h"
#include "chorus/work.h"
#include "common/status.h"
#include "common/types.h"

namespace chorus {

namespace rendezvous {
class Store;  // rendezvous/store.h
}

struct Options {
  // "env://" (default), "tcp://host:port" or "file:///path".
  std::string init_method = "env://";
  // -1: taken from the environment (RANK/WORLD_SIZE or a launcher's variables).
  int rank = -1;
  int world_size = -1;
  // Overrides of the process configuration (CHORUS_* variables); unset = from env.
  std::optional<Config> config;
  // A store to meet the other ranks in instead of the init method's (torch's, through
  // torch_chorus): rank and world_size must then be given. Communicators sharing a
  // store each get their own key space, numbered by arrival.
  std::shared_ptr<rendezvous::Store> store;
};

// A CUDA stream (a cudaStream_t) for the device-buffer forms; {} is the legacy default
// stream. chorus's headers need no CUDA header.
struct CudaStream {
  void* handle = nullptr;
};

namespace internal {
class CommunicatorImpl;
}

class Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> Create(const Options& options = Options());
  ~Communicator();  // Shutdown() if the caller did not.
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;  // rank among the ranks on this host
  int local_size() const;
  // e.g. "rank 0 of 2 on host-a (local rank 0 of 1), tcp/epoll on 10.0.0.1:41234, ...,
  // init env:// (torchrun/env)".
  std::string Describe() const;
  // What this communicator's transport counted so far (messages that arrived before
  // their receive was posted, ...), for diagnostics.
  TrafficCounters Counters() const;
  // How a collective on host buffers of `count` elements of `dtype` would run here, and
  // why: the algorithm the selector picks for that size on this many ranks (with its
  // reason), the windows a large one runs in, and the transport. `collective` by
  // torch's name: "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
  // "gather", "scatter", "all_to_all", "barrier". Moves no data. Also logged for every
  // call at CHORUS_DEBUG=TRACE.
  Result<std::string> Explain(const std::string& collective, size_t count, DataType dtype) const;

  // Point-to-point. Send/Recv take host or device buffers (a device buffer is staged
  // through host memory; it must be ready when called); ISend/IRecv host buffers. The n-th Recv from a peer with a tag
  // receives the n-th Send that peer made to this rank with that tag; sizes must agree.
  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag = 0);
  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag = 0);
  Work ISend(const void* buf, size_t bytes, int peer, uint32_t tag = 0);
  Work IRecv(void* buf, size_t bytes, int peer, uint32_t tag = 0);

  // Typed forms: count elements of dtype.
  Status Send(const void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0) {
    return Send(buf, count * DataTypeSize(dtype), peer, tag);
  }
  Status Recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0) {
    return Recv(buf, count * DataTypeSize(dtype), peer, tag);
  }

  // Collectives on host buffers, with torch.distributed's semantics. `count` is the
  // number of elements per rank (all_gather/gather: elements each rank contributes;
  // reduce_scatter/scatter: elements each rank receives; all_to_all: elements per
  // peer). In-place: send == recv (all_gather: send == recv + rank*count elements).
  // Blocking forms return when this rank's part is done; I-forms return a Work.
  // Broadcast out of place (as ncclBroadcast): the root's send lands in every rank's
  // recv, its own included; other ranks ignore send. Host buffers only.
  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Status Broadcast(void* buf, size_t count, DataType dtype, int root);
  Status Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  Status AllGather(const void* send, void* recv, size_t count, DataType dtype);
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Status Gather(const void* send, void* recv, size_t count, DataType dtype, int root);
  Status Scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype);
  Status Barrier();  // blocks until every rank called Barrier

  Work IAllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Work IBroadcast(void* buf, size_t count, DataType dtype, int root);
  Work IBroadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work IReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  Work IAllGather(const void* send, void* recv, size_t count, DataType dtype);
  Work IReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Work IGather(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work IScatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work IAllToAll(const void* send, void* recv, size_t count, DataType dtype);
  Work IBarrier();

  // The same on CUDA device buffers with NCCL's semantics: the call checks its
  // arguments, enqueues the operation on `stream` and returns; work enqueued on the
  // stream afterwards sees the result. The Work ends with the operation (Wait() blocks
  // the host; errors are reported there). Collectives of ranks that all share one host
  // go through CUDA IPC (peers' buffers read directly; the call returns once every
  // rank has called it; CHORUS_CUDA_IPC=off turns it off); otherwise operations run in
  // the order they were called, one at a time per communicator, through host memory
  // (device -> host -> network -> host -> device). Counters() says which way calls
  // went. Without a usable GPU they fail with "no CUDA device".
  // Host buffers here are an error; so are a device buffer and a host buffer mixed in
  // one call of any form.
  Work AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, CudaStream stream);
  Work Broadcast(void* buf, size_t count, DataType dtype, int root, CudaStream stream);
  Work Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root, CudaStream stream);
  Work AllGather(const void* send, void* recv, size_t count, DataType dtype, CudaStream stream);
  Work ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, CudaStream stream);
  Work Gather(const void* send, void* recv, size_t count, DataType dtype, int root, CudaStream stream);
  Work Scatter(const void* send, void* recv, size_t count, DataType dtype, int root, CudaStream stream);
  Work AllToAll(const void* send, void* recv, size_t count, DataType dtype, CudaStream stream);
  Work Barrier(CudaStream stream);
  // A send waits for its data on the stream; a recv's data is there for later work.
  Work Send(const void* buf, size_t bytes, int peer, CudaStream stream, uint32_t tag = 0);
  Work Recv(void* buf, size_t bytes, int peer, CudaStream stream, uint32_t tag = 0);

  // torch's new_group: ranks calling with the same color form a new communicator,
  // ordered by (key, rank). A negative color means "not in any group": the result
  // is then an empty pointer. Every rank must call Split (it is collective).
  Result<std::unique_ptr<Communicator>> Split(int color, int key);

  // Waits for the other ranks to reach Shutdown (bounded by the timeout), then closes
  // connections and, on the rank that hosts it, the rendezvous store. Idempotent.
  Status Shutdown();
  // Fails every pending and future operation with `reason` and tells the peers.
  void Abort(const std::string& reason);

 private:
  explicit Communicator(std::unique_ptr<internal::CommunicatorImpl> impl);
  std::unique_ptr<internal::CommunicatorImpl> impl_;
};

}  // namespace chorus
