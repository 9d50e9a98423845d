// Every collective on device buffers of ranks that share a host, through CUDA IPC
// (transport/cuda_ipc): each rank maps the buffers its peers export and reads them
// directly; it writes only its own buffers. Copies and reduction kernels go on the
// caller's stream, in stream order, and the peers' streams order each other with
// signals (algos/cuda_ipc_sync.h: flags in device memory the streams write and wait
// on, or interprocess events); host messages (ctx.transport) carry the handles and say
// "signalled". The call returns once its work is enqueued on this rank (which needs
// every peer to have called it too); nothing waits for the GPU.
//
// Schedule, rank r of n:
//   send the offer (buffers, signals, device) to all peers
//   map the peers' buffers, reach their signals; signal READY on the stream
//   all agree the call can run this way, else none runs it
//   the stream waits for every peer's READY       // their inputs are written
//   phase 1: read the peers' inputs, write our output (reduce or copy)
//   all_reduce only: signal MID, tell the peers; wait for their MID; phase 2: copy
//     every peer's reduced slice from its output into ours
//   signal DONE, tell the peers; the stream waits for every peer's DONE
//                                                 // nobody reads our buffers any more
// all_reduce of ranks that all use one GPU: rank 0 alone reduces every input into
// every output (RunLedByRankZero in the .cc file says why and how).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "algos/context.h"
#include "algos/cuda_ipc_sync.h"
#include "algos/fingerprint.h"
#include "common/types.h"
#include "kernels/cuda/stream_ops.h"
#include "transport/cuda_ipc/cuda_ipc.h"

namespace chorus::algos {

// One call on this rank: the buffers and how many bytes of each it uses (0: unused).
struct DeviceCall {
  Collective kind;
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

// What a communicator keeps between calls: its signals and the peers' (opened events),
// the peers' mapped buffers and flags. Used by one call at a time.
struct CudaIpcState {
  SyncState sync;
  transport::cuda_ipc::PeerMappings mappings;
  bool always = false;            // CHORUS_CUDA_IPC=always on this rank: never report time slicing
  bool split_on_one_gpu = false;  // CHORUS_CUDA_IPC_ONE_GPU=split: all_reduce split even on one GPU
  bool mps = false;               // this device's contexts are shared through MPS (asked once)
  // This rank stages stream-form calls with signal flags (CHORUS_STAGING_SYNC=signals,
  // where the driver has them): no kernel of its spins on the GPU while it waits.
  bool signal_flags = false;
};

// How a call went: run (enqueued), or declined by some rank (nothing was enqueued
// anywhere: every rank declines and runs it another way). `for_good` where a rank
// can never take part (no events, a peer's GPU out of reach): later calls should not
// ask again. The reasons of the declining ranks are in `why`.
struct IpcOutcome {
  bool ran = false;
  bool for_good = false;
  std::string why;
  // Where it ran: an event on the stream after the call's work (the Work waits for it).
  std::shared_ptr<kernels::cuda::StreamEvent> end;
  // Where it ran: ranks found sharing a GPU without MPS ("ranks 0 and 1 share GPU-...
  // without MPS"; empty: none), the same text on every rank (from the offers).
  std::string time_sliced;
  // Where it ran: every rank stages stream-form calls with signal flags (from the offers).
  bool every_rank_signals = false;
  // Where it ran: the streams ordered each other with flags, else with events; the
  // first call with events says why in `no_flags` ("this rank: CHORUS_CUDA_IPC_SYNC=
  // events", "rank 1 offers none", ...).
  bool flags = false;
  std::string no_flags;
};

// Runs `call` on `stream` (a cudaStream_t; null: the legacy default stream).
// An error means the call failed part way; the caller aborts the communicator.
Result<IpcOutcome> RunCudaIpc(const Context& ctx, const DeviceCall& call, CudaIpcState& state, void* stream);

}  // namespace chorus::algos
