// Collectives and send/recv on CUDA device buffers, run by the host algorithms through
// staging copies (kernels/cuda/stream_ops.h).
//
// Stream form, NCCL's semantics: Enqueue() records an event on the caller's stream,
// holds the stream behind a semaphore, posts one task to the communicator's executor and
// returns. The task, in the order the calls were made:
//   wait for the event                         // the caller's inputs are written
//   copy the device inputs to pinned staging
//   run the host operation on the staging      // the same algorithms as host buffers
//   copy the results to the device outputs
//   release the semaphore                      // work enqueued after the call runs
// For an algorithm that streams (algos::Streams: the ring all-reduce) the three middle
// steps overlap (chorus/staging_pipeline.h): the input comes over in 2 MiB segments
// that the algorithm waits for one by one, and each segment of the result goes back
// as soon as it is final.
// A large all_reduce, broadcast or reduce comes as several windows (StagedRuns, of at
// most CHORUS_STAGING_WINDOW bytes): one event and one semaphore for the call, the windows
// staged one after the other through the same pinned bounce buffers, so pinned memory
// stays bounded by the window, not the call.
// The semaphore is released on failure too (the outputs are then undefined, as with NCCL); the
// Work carries the error, and a failed collective aborts the communicator as usual.
//
// With signal flags instead (CHORUS_STAGING_SYNC=signals, where the driver has stream
// memory operations): Enqueue() puts every copy of every window on the streams at
// once, input copies on a staging stream behind the caller's event, result copies on
// the caller's stream, each behind or before a flag in mapped host memory
// (signalled_staging.h has the schedule); the task only polls and stores those flags.
// It makes no CUDA call, so nothing that holds CUDA's context lock while it waits for
// the device (a kernel's first launch under lazy loading, a cudaFree) can stall it
// behind its own call, and no kernel spins while the stream waits. Each window's input
// copies wait (an event) for the previous window's last copy back, so the bounce buffers
// are reused only once the previous window's results left them.
//
// Host form given device buffers (detected): the same staging on the calling thread;
// as with host buffers the inputs must be ready when the call is made (synchronize
// the stream that wrote them first), and the outputs are there when it returns.
//
// Stream-form send/recv run on the executor in call order too. A transport that makes
// a large send wait for its receive (RDMA's RTS/CTS) therefore needs the two ranks to
// order them compatibly (one sends first, the other receives first), as blocking
// sends do; TCP buffers unexpected messages and does not care.
//
// Ranks that all share one host do not come here for collectives: CommunicatorImpl
// runs those through CUDA IPC (algos/cuda_ipc_collectives.h) where every rank can, and
// returns a Work from WorkUntilEvent. Not yet: reductions on the GPU here (every
// byte goes device -> host -> wire -> host -> device, and the host reduces).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algos/context.h"
#include "chorus/collective_call.h"
#include "chorus/executor.h"
#include "chorus/signalled_staging.h"
#include "chorus/work.h"
#include "common/deadline.h"
#include "common/status.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::internal {

// A call staged in windows (collective_call.h's StagingWindows), one after the other
// through the same pinned bounce buffers, sized for the first (the largest): each window's
// buffers and its host operation. Most calls are one window.
struct StagedWindow {
  DeviceIo io;
  HostRun run;
};
using StagedRuns = std::vector<StagedWindow>;

// Where the call's buffers live. Host: every used buffer is host memory (or managed,
// which the CPU reaches directly); device: every used buffer is device memory.
// Mixed is an error naming both buffers, as is a host buffer in the stream form.
// ClassifyIo's error names the buffers; the caller adds which call it was.
enum class IoPlace { kHost, kDevice };
Result<IoPlace> ClassifyIo(const DeviceIo& io);
Status CheckStreamIo(const DeviceIo& io, const std::string& what);
// The device of the call's buffers (none: the calling thread's current device).
Result<int> DeviceOfIo(const DeviceIo& io);

// A Work that ends when its stream reaches `event`; Wait() past the timeout is an error
// naming `what`.
Work WorkUntilEvent(std::shared_ptr<const kernels::cuda::StreamEvent> event, int64_t timeout_ms, std::string what);

class DeviceCalls {
 public:
  // `signals`: stage stream-form calls with every CUDA operation enqueued at the call
  // (CHORUS_STAGING_SYNC=signals; see Enqueue), where the driver allows it.
  explicit DeviceCalls(bool signals = false);
  ~DeviceCalls();
  DeviceCalls(const DeviceCalls&) = delete;
  DeviceCalls& operator=(const DeviceCalls&) = delete;

  // The stream form (see above), one semaphore for all of the call's windows (each has at
  // most `timeout_ms`); `what` names the call in errors. The runs have taken their
  // sequence numbers: when the call cannot be enqueued after all, `broken` is called
  // with the reason (the communicator aborts: its peers wait for the call).
  Work Enqueue(void* stream, StagedRuns windows, Executor& executor, int64_t timeout_ms, std::string what,
               const std::function<void(const Status&)>& broken);
  // Sets up the CUDA resources (once, on the device of the call's buffers); the error
  // says why they cannot be.
  Status Ready(const DeviceIo& io);
  // The device the CUDA resources were made on (-1: none yet).
  int device() const;
  // Calls staged so far (every form).
  uint64_t staged() const { return staged_.load(); }
  // Of those, stream-form calls staged with signal flags.
  uint64_t signalled() const { return signalled_.load(); }
  // The host form with device buffers, on the calling thread, each window within
  // `timeout_ms`; `on_executor` where that is the executor's (a queued host-form call:
  // it stages with the executor's set).
  Status RunNow(const StagedRuns& windows, int64_t timeout_ms, bool on_executor = false);

 private:
  struct Staging;       // two copy streams (to the host, back) and two pinned buffers, grown on demand
  struct HostBuffers {  // a call's pinned bounce buffers (send may point into recv's: aliased calls)
    char* send = nullptr;
    char* recv = nullptr;
  };
  Status Init(int device);  // the semaphore and both staging sets, on first use, on `device` (res_ set once done)
  // Enqueue with signal flags (CHORUS_STAGING_SYNC=signals), mu_ held: every window's
  // copies go on the streams now, behind and before flags the task only polls and
  // stores (signalled_staging.h); `fail` reports a call that cannot be enqueued.
  Work EnqueueSignalled(void* stream, StagedRuns windows, Executor& executor, int64_t timeout_ms, std::string what,
                        const std::function<Work(const Status&)>& fail);
  static Status Stage(Staging& s, const DeviceIo& io, const HostBuffers& host, const HostRun& run, Deadline deadline);
  // Every window in turn (stops at the first error).
  static Status StageAll(Staging& s, const StagedRuns& windows, const HostBuffers& host, int64_t timeout_ms);

  const bool signals_;
  std::mutex mu_;         // Init, next_seq_, the semaphore, the signal flags' numbers
  std::mutex caller_mu_;  // the caller-thread staging set
  Status init_error_;
  uint64_t next_seq_ = 0;
  std::atomic<uint64_t> staged_{0};
  std::atomic<uint64_t> signalled_{0};
  struct Resources;
  std::unique_ptr<Resources> res_;
};

}  // namespace chorus::internal
