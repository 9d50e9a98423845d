// Streams one call's device buffers through host bounce buffers while the algorithm runs
// (algos::StreamStaging): the input goes device -> host in segments, in the order the
// algorithm reads them (InputOrder, else its first wait first, then address order),
// and it waits for them one by one; each segment of the result goes host -> device
// as soon as the algorithm has reported all of it final. So for a streaming algorithm
//   device -> host copy | send | receive | reduce | host -> device copy
// overlap, instead of running one after the other over the whole buffer.
//
// The copies belong to CopyEngines: CUDA streams in the library (device_calls.cc),
// a host thread in the tests, which thus run this exact logic without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "algos/context.h"
#include "common/deadline.h"
#include "common/status.h"

namespace chorus::internal {

// Runs the host operation on host bounce buffers of (send, recv); `staging` is set where
// they are streamed (DeviceIo::streamed), else null.
using HostRun = std::function<Status(const void* send, void* recv, algos::StreamStaging* staging)>;

// Asynchronous copies that complete in the order they were started.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Enqueues dst <- src; returns a ticket for Wait.
  virtual Result<uint64_t> Start(void* dst, const void* src, size_t bytes) = 0;
  // Until the copy with this ticket, and so every earlier one, is done.
  virtual Status Wait(uint64_t ticket, Deadline deadline) = 0;
};

// The segments of `bytes` (of `segment` bytes each) in the order `ranges` reads them
// (empty and out-of-range ranges ignored), then every other one in address order.
std::vector<size_t> SegmentsInOrder(const std::vector<std::pair<size_t, size_t>>& ranges, size_t bytes, size_t segment);

class StagingPipeline final : public algos::StreamStaging {
 public:
  // `in` copies the input to the host, `out` the results back: two engines, so that
  // results flow back while input is still coming in.
  StagingPipeline(CopyEngine& in, CopyEngine& out, size_t segment_bytes, Deadline deadline)
      : in_(in), out_(out), segment_(segment_bytes > 0 ? segment_bytes : 1), deadline_(deadline) {}
  ~StagingPipeline() override = default;
  StagingPipeline(const StagingPipeline&) = delete;
  StagingPipeline& operator=(const StagingPipeline&) = delete;

  // The input: `bytes` from `device` to `host`, segment by segment. The copies start at
  // the algorithm's InputOrder or first WaitInput (so in the order it reads), or here
  // with `start_now`.
  Status BeginInput(void* host, const void* device, size_t bytes, bool start_now = false);
  // Where the results go once final: `bytes` of `host` to `device`.
  void SetOutput(void* device, const void* host, size_t bytes);

  void InputOrder(const std::vector<std::pair<size_t, size_t>>& ranges) override;
  Status WaitInput(size_t offset, size_t bytes) override;
  void OutputFinal(size_t offset, size_t bytes) override;

  // After the algorithm returned. `ok`: copies back what was never reported final
  // (nothing, for a correct algorithm), then waits for every copy. Not ok: the results
  // are undefined; only waits for the copies in flight (the bounce buffers are reused).
  Status Finish(bool ok);

 private:
  size_t Segments(size_t bytes) const { return (bytes + segment_ - 1) / segment_; }
  // Starts the input's copies: the segments of `ranges` in that order, then the rest.
  void StartInput(const std::vector<std::pair<size_t, size_t>>& ranges);
  void StartOutput(size_t seg);
  void Fail(const Status& st) {
    if (error_.ok()) error_ = st;
  }

  CopyEngine& in_;
  CopyEngine& out_;
  const size_t segment_;
  const Deadline deadline_;
  Status error_;

  char* in_host_ = nullptr;
  const char* in_device_ = nullptr;
  size_t in_bytes_ = 0;
  bool in_started_ = false;
  std::vector<uint64_t> in_tickets_;  // per input segment, once started
  bool in_any_ = false;
  uint64_t in_last_ = 0;    // the last input copy started
  uint64_t in_waited_ = 0;  // copies with tickets below this are done (in-order engine)

  char* out_device_ = nullptr;
  const char* out_host_ = nullptr;
  size_t out_bytes_ = 0;
  // Per output segment: the final ranges reported so far, merged ([begin, end), sorted),
  // and whether its copy has started.
  std::vector<std::vector<std::pair<size_t, size_t>>> final_;
  std::vector<bool> started_;
  bool out_any_ = false;
  uint64_t out_last_ = 0;
};

}  // namespace chorus::internal
