// The host side of a staged stream-form call whose CUDA work was all enqueued when the
// call was made (CHORUS_STAGING_SYNC=signals, device_calls.h). Per window, with
// sequence number `seq` and the windows chained in call order:
//   copy stream:   wait for the previous window's last copy back (an event: its results
//                  left the bounce buffers)
//                  for each input segment k, in the order the algorithm reads them:
//                  copy device -> host; IN[k] = seq
//   caller stream: for each output segment k: wait OUT[k] == seq; copy host -> device
//                  wait DONE >= seq                         // the task is done with the bounce buffers
//                  LANDED = seq                             // this window's results are on the device
//   task (here):   wait IN[k] == seq for the segments the algorithm reads, run it on the
//                  host bounce buffers, OUT[k] = seq as each output segment is final, then
//                  DONE = seq once the algorithm returned (its sends from the bounce buffers
//                  included, and for a window without outputs, a send's, say)
// The flags live in pinned, device-mapped host memory (kernels::cuda::SignalFlags); the
// task only reads and writes them, so it makes no CUDA call at all and nothing holding
// CUDA's context lock (a lazily loaded kernel's first launch, a cudaFree, both of which
// wait for the device) can stop it. Whatever happens to the window, every OUT flag is
// set at the end, so the caller's stream never waits for ever (its outputs are then
// undefined, and the Work says why).
// This file has no CUDA in it: the tests run it with a thread standing in for the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/collective_call.h"
#include "chorus/staging_pipeline.h"
#include "common/deadline.h"
#include "common/status.h"

namespace chorus::internal {

// The flags as the host sees them: [0] LANDED, [1] DONE, then IN[0..max_segments), then
// OUT[0..max_segments). LANDED and DONE only grow (in sequence order, wrapping).
struct SignalView {
  volatile uint32_t* flags = nullptr;
  size_t max_segments = 0;

  static constexpr size_t kLanded = 0, kDone = 1;
  size_t In(size_t seg) const { return 2 + seg; }
  size_t Out(size_t seg) const { return 2 + max_segments + seg; }
  static size_t FlagsFor(size_t max_segments) { return 2 + 2 * max_segments; }

  uint32_t Load(size_t i) const { return __atomic_load_n(const_cast<uint32_t*>(&flags[i]), __ATOMIC_ACQUIRE); }
  // Everything this thread wrote before is visible to whoever sees the value.
  void Store(size_t i, uint32_t v) const { __atomic_store_n(const_cast<uint32_t*>(&flags[i]), v, __ATOMIC_RELEASE); }
  // Until flag i == v (a brief spin, then sleeps up to 100 us); a timeout names `what`.
  Status WaitFor(size_t i, uint32_t v, Deadline deadline, const char* what) const;
  // Until flag i reached v in sequence order (v or a later number, wrap-safe: LANDED
  // moves on as later windows land).
  Status WaitReached(size_t i, uint32_t v, Deadline deadline, const char* what) const;
};

// The next window's number after `seq` (0 is never one: unused flags hold it).
inline uint32_t NextSeq(uint32_t seq) { return seq + 1 == 0 ? 1 : seq + 1; }

// One window: its number, how its buffers split into segments, and the order the
// input's segments are copied in (the algorithm's read order, io.input_order).
struct SignalledWindow {
  uint32_t seq = 0;
  size_t segment = 0;  // bytes per segment
  size_t in_segments = 0, out_segments = 0;
  std::vector<size_t> in_order;  // every input segment once
};

// The window of `io`: segments of `base` bytes, larger where more than `max_segments`
// would be needed.
SignalledWindow PlanWindow(const DeviceIo& io, uint32_t seq, size_t base, size_t max_segments);

// The task's part of one window on the host bounce buffers (host_send may point into
// host_recv: aliased calls): waits for the input, runs `run` (streamed through a
// StagingPipeline where io.streamed), sets every OUT flag. Within `deadline`.
Status RunSignalledWindow(const SignalView& flags, const SignalledWindow& w, const DeviceIo& io, const HostRun& run,
                          char* host_send, char* host_recv, Deadline deadline);

// Sets every OUT flag of `w`, then DONE (the end of every window, and what a window
// whose task will not run gets: the caller's stream then goes on).
void ReleaseWindow(const SignalView& flags, const SignalledWindow& w);

}  // namespace chorus::internal
