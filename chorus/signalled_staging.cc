#include "chorus/signalled_staging.h"

#include <algorithm>

#include "common/poll.h"

namespace chorus::internal {
namespace {

// The input's copies, enqueued at the call in w.in_order on one stream: a segment's
// ticket is its place in that order, and its copy is done once its IN flag holds the
// window's seq (and so, the stream being in order, are all before it: what CopyEngine
// promises).
class SignalledInput final : public CopyEngine {
 public:
  SignalledInput(const SignalView& flags, const SignalledWindow& w, const char* host)
      : flags_(flags), w_(w), host_(host), place_(w.in_order.size()) {
    for (size_t i = 0; i < w.in_order.size(); ++i) place_[w.in_order[i]] = i;
  }
  Result<uint64_t> Start(void* dst, const void*, size_t) override {
    return place_[static_cast<size_t>((static_cast<const char*>(dst) - host_) / w_.segment)];
  }
  Status Wait(uint64_t ticket, Deadline deadline) override {
    return flags_.WaitFor(flags_.In(w_.in_order[ticket]), w_.seq, deadline, "the input's copy to the host");
  }

 private:
  const SignalView& flags_;
  const SignalledWindow& w_;
  const char* host_;
  std::vector<uint64_t> place_;  // segment -> its place in w.in_order
};

// The results' copies, enqueued at the call on the caller's stream, each behind its
// segment's OUT flag: starting one is setting the flag. The stream does the copy; the
// next window's input waits for it (LANDED), so there is nothing to wait for here.
class SignalledOutput final : public CopyEngine {
 public:
  SignalledOutput(const SignalView& flags, const SignalledWindow& w, const char* device)
      : flags_(flags), w_(w), device_(device) {}
  Result<uint64_t> Start(void* dst, const void*, size_t) override {
    flags_.Store(flags_.Out(static_cast<size_t>((static_cast<const char*>(dst) - device_) / w_.segment)), w_.seq);
    return ++started_;
  }
  Status Wait(uint64_t, Deadline) override { return Status::Ok(); }

 private:
  const SignalView& flags_;
  const SignalledWindow& w_;
  const char* device_;
  uint64_t started_ = 0;
};

}  // namespace

Status SignalView::WaitFor(size_t i, uint32_t v, Deadline deadline, const char* what) const {
  return PollUntil([&] { return Load(i) == v; }, deadline, what);
}

Status SignalView::WaitReached(size_t i, uint32_t v, Deadline deadline, const char* what) const {
  return PollUntil([&] { return static_cast<int32_t>(Load(i) - v) >= 0; }, deadline, what);
}

SignalledWindow PlanWindow(const DeviceIo& io, uint32_t seq, size_t base, size_t max_segments) {
  const size_t bytes = std::max(io.send_bytes, io.recv_bytes);
  size_t segment = std::max<size_t>(base, 1);
  if (max_segments > 0 && bytes > segment * max_segments) segment = (bytes + max_segments - 1) / max_segments;
  SignalledWindow w;
  w.seq = seq;
  w.segment = segment;
  w.in_segments = (io.send_bytes + segment - 1) / segment;
  w.out_segments = (io.recv_bytes + segment - 1) / segment;
  w.in_order = SegmentsInOrder(io.input_order, io.send_bytes, segment);
  return w;
}

void ReleaseWindow(const SignalView& flags, const SignalledWindow& w) {
  for (size_t k = 0; k < w.out_segments; ++k) flags.Store(flags.Out(k), w.seq);
  flags.Store(SignalView::kDone, w.seq);
}

Status RunSignalledWindow(const SignalView& flags, const SignalledWindow& w, const DeviceIo& io, const HostRun& run,
                          char* host_send, char* host_recv, Deadline deadline) {
  Status st = Status::Ok();
  if (!io.streamed) {
    for (size_t k : w.in_order) {
      if (st.ok()) st = flags.WaitFor(flags.In(k), w.seq, deadline, "the input's copy to the host");
    }
    if (st.ok()) st = run(host_send, host_recv, nullptr);
  } else {
    SignalledInput in(flags, w, host_send);
    SignalledOutput out(flags, w, static_cast<const char*>(io.recv));
    StagingPipeline pipeline(in, out, w.segment, deadline);
    st = pipeline.BeginInput(host_send, io.send, io.send_bytes);
    pipeline.SetOutput(io.recv, host_recv, io.recv_bytes);
    if (st.ok()) st = run(host_send, host_recv, &pipeline);
    Status done = pipeline.Finish(st.ok());
    if (st.ok()) st = done;
  }
  ReleaseWindow(flags, w);  // failed or not: the caller's stream goes on (DONE: the bounce buffers are free)
  return st;
}

}  // namespace chorus::internal
