// The state behind a Communicator: the rendezvous store, the peers' info, the
// transport, the selector, the collective sequence counter and the async executor.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algos/cuda_ipc_collectives.h"
#include "algos/selector.h"
#include "chorus/collective_call.h"
#include "chorus/communicator.h"
#include "chorus/device_calls.h"
#include "chorus/executor.h"
#include "common/buffer_cache.h"
#include "common/phase_clock.h"
#include "kernels/cuda/device_memory.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/init_method.h"
#include "rendezvous/membership.h"
#include "rendezvous/rendezvous.h"
#include "transport/transport.h"

namespace chorus::internal {

class CommunicatorImpl {
 public:
  static Result<std::unique_ptr<CommunicatorImpl>> Create(const Options& options);
  ~CommunicatorImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  std::string Describe() const;
  TrafficCounters Counters() const;
  Result<std::string> Explain(const std::string& collective, size_t count, DataType dtype) const;

  // ISend/IRecv: host buffers only (a device buffer is an error naming the forms
  // that take one).
  Work PostP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag);
  // Send/Recv: host buffers, or a device buffer staged through host memory.
  Status RunP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag);
  // Blocking collective, on the calling thread (device buffers are staged).
  Status Run(const CollectiveCall& call);
  // Asynchronous collective, on the executor; its sequence number is taken now, so
  // calls keep the order in which this rank made them.
  Work Post(const CollectiveCall& call);
  // The CUDA-stream forms (device_calls.h): enqueued on `stream`, run by the executor.
  Work Enqueue(const CollectiveCall& call, void* stream);
  Work EnqueueP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag, void* stream);
  Result<std::unique_ptr<CommunicatorImpl>> Split(int color, int key);
  Status Shutdown();
  void Abort(const Status& reason);
  // "rank 3 (host h, 10.0.0.2:4000)", for error messages.
  std::string PeerName(int peer) const;

 private:
  CommunicatorImpl() = default;
  Status Init(const Options& options);
  // Joins this communicator's ranks under `prefix` of the store: comm id, listen,
  // all-gather of peer info, full-mesh connect. Marks its steps on `phases` and logs
  // them at INFO.
  Status Connect(const std::string& prefix, PhaseClock& phases);
  // After a failed set-up, the rank hosting the store keeps it up (a few seconds at
  // most) until the other ranks have left, so they read why rather than a closed store.
  void LingerWhileOthersLeave();
  Status CheckUsable() const;
  // A collective's context: the next sequence number, the call's fingerprint with the
  // algorithm, the deadline and the scratch cache.
  algos::Context NewContext(const CollectiveCall& call, algos::Algorithm algorithm);
  // Validates the call, picks the algorithm, takes the sequence number; the result
  // runs the call on the buffers it is given (the caller's, or host bounce buffers).
  // Marks `io` streamed where the chosen algorithm uses the staging hooks. `call` may
  // be a window of `whole`, whose fingerprint it then carries (ranks that disagree on
  // the whole call fail at its first window, before anything is written).
  // Checks the call (one window of `whole`) and the communicator, chooses its algorithm
  // and makes its context (numbered, fingerprinted as `whole`).
  Status Choose(const CollectiveCall& call, const CollectiveCall& whole, std::optional<algos::Context>* ctx,
                algos::Algorithm* algorithm);
  Result<HostRun> Prepare(const CollectiveCall& call, DeviceIo* io, const CollectiveCall& whole);
  // Runs the call by `algorithm` now, by ctx.deadline; a failure aborts the transport, a success releases the
  // call's tags.
  Status RunChosen(algos::Context& ctx, const CollectiveCall& call, algos::Algorithm algorithm);
  // Prepare for each of the call's windows (StagingWindows, CHORUS_STAGING_WINDOW), in
  // order: on every rank, whatever its buffers, so that all run the same collectives.
  Result<StagedRuns> PrepareWindows(const CollectiveCall& call);
  // Validates a send/recv; the result describes it for errors.
  Result<std::string> CheckP2P(bool is_send, const void* buf, size_t bytes, int peer, uint32_t tag);
  Work PostP2PHost(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag, std::string what);
  // A send/recv as a HostRun (on staged host memory), for the device forms.
  HostRun P2PRun(bool is_send, size_t bytes, int peer, uint32_t tag, std::string what);
  // Where the call's buffers are; a mixed call is an error naming it.
  Result<IoPlace> PlaceOf(const CollectiveCall& call, const DeviceIo& io) const;
  // The stream forms' common path: checks the buffers and CUDA before `prepare`
  // takes a sequence number, then enqueues.
  Work EnqueueOn(void* stream, const DeviceIo& io, const std::string& what,
                 const std::function<Result<StagedRuns>()>& prepare);
  // A stream-form collective through CUDA IPC where the selector picks it and every
  // rank can (algos/cuda_ipc_collectives.h); nothing where it runs another way.
  // `caller_stream` (null: the legacy default stream) for the CUDA-stream forms; none
  // for the host form (inputs ready, results there on return), which runs on a stream
  // of the communicator's own.
  std::optional<Work> TryCudaIpc(const CollectiveCall& call, const DeviceIo& io, std::optional<void*> caller_stream);

  Config config_;
  rendezvous::InitSpec spec_;
  // Shared with communicators split from this one: the store outlives them all.
  std::shared_ptr<rendezvous::Rendezvous> rdv_;
  // This rank's place in the job (Init only: a split communicator shares its parent's).
  std::optional<rendezvous::Membership> membership_;
  std::string prefix_;  // this communicator's key space in the store
  std::vector<rendezvous::PeerInfo> peers_;
  // The algorithms' scratch memory, kept between calls; declared before the transport
  // and the executor, which may hold its buffers until they are destroyed.
  std::unique_ptr<BufferCache> scratch_;
  std::unique_ptr<transport::Transport> transport_;
  std::string transport_choice_;
  std::unique_ptr<algos::Selector> selector_;
  algos::Tuning tuning_;  // its topology is the selector's
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::atomic<uint64_t> coll_seq_{0};
  std::atomic<uint64_t> split_seq_{0};
  std::unique_ptr<DeviceCalls> device_;  // declared before executor_: its tasks use it
  std::mutex ipc_mu_;                    // one CUDA IPC call at a time
  struct IpcDevice {
    algos::CudaIpcState state;
    kernels::cuda::Stream host_form_stream;  // made by the first host-form call on the device
  };
  std::map<int, std::unique_ptr<IpcDevice>> ipc_;  // by CUDA device
  std::string ipc_declined_;                   // why the ranks found CUDA IPC impossible for good (same on every rank)
  std::string ipc_turned_off_;                 // the ranks that set CHORUS_CUDA_IPC=off (empty: none)
  std::string gpu_time_sliced_;                // ranks sharing a GPU without MPS, from the first call through CUDA IPC
  bool time_sliced_signals_ = false;           // ... and every rank stages stream-form calls with signal flags
  bool ipc_flags_ = false;                     // the last call through CUDA IPC ordered the streams with flags
  std::atomic<uint64_t> device_calls_ipc_{0};  // the staged ones: DeviceCalls::staged()
  std::atomic<uint64_t> device_calls_ipc_flags_{0};
  std::unique_ptr<Executor> executor_;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
  bool connected_ = false;  // Connect() succeeded: peers expect the shutdown barriers
};

}  // namespace chorus::internal
