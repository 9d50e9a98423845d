#include "chorus/device_calls.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "chorus/signalled_staging.h"
#include "chorus/staging_pipeline.h"
#include "common/log.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::internal {

namespace cuda = kernels::cuda;

namespace {

std::string Where(const char* name, const void* p, cuda::MemoryKind k) {
  char addr[32];
  std::snprintf(addr, sizeof(addr), "%p", p);
  return std::string(name) + " buffer " + addr + " is " + cuda::MemoryKindName(k) + " memory";
}

// Grows `b` to at least `bytes` (at least doubling; contents not kept). The old buffer
// goes to `outgrown`, never freed here (see Staging).
Status Reserve(cuda::PinnedBuffer& b, size_t bytes, std::vector<cuda::PinnedBuffer>& outgrown) {
  if (b.bytes() >= bytes) return Status::Ok();
  Result<cuda::PinnedBuffer> n = cuda::PinnedBuffer::Allocate(std::max(bytes, 2 * b.bytes()));
  if (!n.ok() && bytes < 2 * b.bytes()) n = cuda::PinnedBuffer::Allocate(bytes);  // room for this call only
  if (!n.ok()) return n.status();
  if (b.bytes() > 0) outgrown.push_back(std::move(b));
  b = std::move(n.value());
  return Status::Ok();
}

// The segment of a streamed call's buffers: large enough that a copy runs near full
// speed, small against a ring chunk's trip so the first one waits little.
constexpr size_t kStagingSegment = 2 << 20;
// Signal flags per direction (CHORUS_STAGING_SYNC=signals): windows of up to 8 GiB in
// 2 MiB segments; larger ones take larger segments.
constexpr size_t kMaxSignalSegments = 4096;

// One window's copies on the two streams (signalled_staging.h has the schedule):
//   copies: wait for `previous` (the last window's results left the bounce buffers);
//           per input segment k in w.in_order: device -> host, IN[k] = seq
//   caller: per output segment: wait OUT[k] == seq, host -> device; wait DONE >= seq;
//           LANDED = seq
// Returns the event after this window's results, for the next window's copies: the one
// stream waits for the other through an event, which CUDA sees (a wait on a flag
// written by another stream is an order CUDA's scheduler does not know about).
Result<cuda::StreamEvent> EnqueueWindowCopies(const cuda::SignalFlags& flags, const SignalView& view,
                                              const SignalledWindow& w, const cuda::StreamEvent* previous,
                                              const DeviceIo& io, char* host_send, char* host_recv, void* copies,
                                              void* caller) {
  if (previous != nullptr) CHORUS_RETURN_IF_ERROR(previous->EnqueueWaitOn(copies));
  const auto* send = static_cast<const char*>(io.send);
  for (size_t k : w.in_order) {
    const size_t off = k * w.segment;
    const size_t n = std::min(w.segment, io.send_bytes - off);
    CHORUS_RETURN_IF_ERROR(cuda::CopyAsync(host_send + off, send + off, n, copies));
    CHORUS_RETURN_IF_ERROR(flags.EnqueueWrite(copies, view.In(k), w.seq));
  }
  auto* recv = static_cast<char*>(io.recv);
  for (size_t k = 0; k < w.out_segments; ++k) {
    const size_t off = k * w.segment;
    CHORUS_RETURN_IF_ERROR(flags.EnqueueWait(caller, view.Out(k), w.seq));
    const size_t n = std::min(w.segment, io.recv_bytes - off);
    CHORUS_RETURN_IF_ERROR(cuda::CopyAsync(recv + off, host_recv + off, n, caller));
  }
  CHORUS_RETURN_IF_ERROR(flags.EnqueueWaitReached(caller, SignalView::kDone, w.seq));
  CHORUS_RETURN_IF_ERROR(flags.EnqueueWrite(caller, SignalView::kLanded, w.seq));
  return cuda::StreamEvent::Record(caller);
}

// Sets every OUT flag of windows whose task never ran (the executor dropped it), so
// their caller's stream goes on.
struct ReleaseUnrun {
  SignalView view;
  std::vector<SignalledWindow> plan;
  std::atomic<bool> ran{false};
  ~ReleaseUnrun() {
    if (ran.load()) return;
    for (const SignalledWindow& w : plan) ReleaseWindow(view, w);
  }
};

// A CopyEngine on a CUDA stream: an event after each copy.
class CudaCopies final : public CopyEngine {
 public:
  explicit CudaCopies(const cuda::CopyStream& stream) : stream_(stream) {}
  Result<uint64_t> Start(void* dst, const void* src, size_t bytes) override {
    Result<cuda::StreamEvent> m = stream_.Start(dst, src, bytes);
    if (!m.ok()) return m.status();
    events_.push_back(std::move(m.value()));
    return first_ + events_.size() - 1;
  }
  Status Wait(uint64_t ticket, Deadline deadline) override {
    if (ticket < first_) return Status::Ok();
    CHORUS_RETURN_IF_ERROR(events_[ticket - first_].Wait(deadline, "staging copy"));
    // In order: every event up to this one is done and can go.
    const uint64_t done = ticket - first_ + 1;
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(done));
    first_ += done;
    return Status::Ok();
  }

 private:
  const cuda::CopyStream& stream_;
  std::deque<cuda::StreamEvent> events_;
  uint64_t first_ = 0;  // the ticket of events_.front()
};

// Waits for a stream event.
class EventWork final : public WorkState {
 public:
  EventWork(std::shared_ptr<const cuda::StreamEvent> event, std::chrono::milliseconds timeout, std::string what)
      : event_(std::move(event)), timeout_(timeout), what_(std::move(what)) {}
  bool Test() override { return event_->Reached(); }
  Status Wait(std::chrono::milliseconds timeout) override {
    Status st = event_->Wait(Deadline::AfterMs(timeout.count()), "the operation on its CUDA stream");
    return st.ok() ? st : st.WithContext(what_);
  }
  std::chrono::milliseconds default_timeout() const override { return timeout_; }

 private:
  std::shared_ptr<const cuda::StreamEvent> event_;
  std::chrono::milliseconds timeout_;
  std::string what_;
};

}  // namespace

Work WorkUntilEvent(std::shared_ptr<const cuda::StreamEvent> event, int64_t timeout_ms, std::string what) {
  return Work(std::make_shared<EventWork>(std::move(event), std::chrono::milliseconds(timeout_ms), std::move(what)));
}

Result<IoPlace> ClassifyIo(const DeviceIo& io) {
  const cuda::MemoryKind s = io.send_bytes ? cuda::PointerKind(io.send) : cuda::MemoryKind::kHost;
  const cuda::MemoryKind r = io.recv_bytes ? cuda::PointerKind(io.recv) : cuda::MemoryKind::kHost;
  const bool s_dev = s == cuda::MemoryKind::kDevice, r_dev = r == cuda::MemoryKind::kDevice;
  if (io.send_bytes && io.recv_bytes && s_dev != r_dev) {
    return InvalidArgument(Where("send", io.send, s) + " but " + Where("recv", io.recv, r) +
                           "; pass both on the device or both on the host");
  }
  return (s_dev || r_dev) ? IoPlace::kDevice : IoPlace::kHost;
}

Result<int> DeviceOfIo(const DeviceIo& io) {
  const void* any = io.send_bytes ? io.send : (io.recv_bytes ? io.recv : nullptr);
  return any ? cuda::DeviceOf(any) : cuda::CurrentDeviceIndex();
}

Status CheckStreamIo(const DeviceIo& io, const std::string& what) {
  CHORUS_RETURN_IF_ERROR(kernels::cuda::DeviceStatus().WithContext(what + " on a CUDA stream"));
  for (auto [name, p, bytes] : {std::tuple<const char*, const void*, size_t>{"send", io.send, io.send_bytes},
                                {"recv", io.recv, io.recv_bytes}}) {
    if (bytes == 0) continue;
    const cuda::MemoryKind k = cuda::PointerKind(p);
    if (k == cuda::MemoryKind::kHost) {
      return InvalidArgument(what + ": " + Where(name, p, k) +
                             ", but the CUDA-stream form takes device buffers (use the host form for host memory)");
    }
  }
  return Status::Ok();
}

// A set of staging resources. The executor's set is used by its tasks (one at a time,
// in order) and grown by the threads that post them; the caller's set by host-form
// calls, one at a time. Outgrown buffers are kept until the set is destroyed, after
// every semaphore was released: cudaFreeHost waits for the whole device, and a stream-form call in
// flight holds its stream behind a semaphore that only its task releases, which needs the
// device in turn (the next call's free would stall both until the timeout; see
// docs/design/device_staging.md). Growth by doubling keeps this below what is in use.
struct DeviceCalls::Staging {
  cuda::CopyStream copies;  // to the host (and everything back, when not streamed)
  cuda::CopyStream back;    // streamed results back to the device
  cuda::PinnedBuffer in, out;
  std::vector<cuda::PinnedBuffer> outgrown;

  // Pinned bounce buffers of at least the call's sizes, made before the call runs.
  Result<HostBuffers> Reserve(const DeviceIo& io);
};

Result<DeviceCalls::HostBuffers> DeviceCalls::Staging::Reserve(const DeviceIo& io) {
  // An input inside the output buffer (in place; all_gather's own block) is staged
  // inside the output's bounce buffer at the same offset, so the algorithm sees the alias.
  const auto* send = static_cast<const char*>(io.send);
  const auto* recv = static_cast<const char*>(io.recv);
  const bool aliased = io.send_bytes && io.recv_bytes && send >= recv && send + io.send_bytes <= recv + io.recv_bytes;
  CHORUS_RETURN_IF_ERROR(chorus::internal::Reserve(out, io.recv_bytes, outgrown));
  CHORUS_RETURN_IF_ERROR(chorus::internal::Reserve(in, aliased ? 0 : io.send_bytes, outgrown));
  HostBuffers h;
  h.recv = io.recv_bytes ? out.get() : nullptr;
  h.send = aliased ? h.recv + (send - recv) : (io.send_bytes ? in.get() : nullptr);
  return h;
}

struct DeviceCalls::Resources {
  int device = 0;    // where the streams, events and semaphore were made: every call's buffers are there
  Staging executor;  // used by the executor's thread only (one task at a time), grown under mu_
  Staging caller;    // used under caller_mu_ by RunNow
  // CHORUS_STAGING_SYNC=signals, where the driver allows it (else flags is empty): the
  // bounce buffers and copy stream of signalled calls, the flags, the last window's number
  // and the event after its results (the next window's input copies wait for it).
  Staging signalled;
  cuda::SignalFlags flags;
  uint32_t seq = 0;
  std::shared_ptr<cuda::StreamEvent> landed;
  SignalView view() const { return SignalView{flags.host(), kMaxSignalSegments}; }
  // Last, so destroyed first: it releases every semaphore before the staging's pinned memory goes.
  cuda::StreamSemaphore semaphore;
};

DeviceCalls::DeviceCalls(bool signals) : signals_(signals) {}
DeviceCalls::~DeviceCalls() = default;

Status DeviceCalls::Init(int device) {
  if (res_) {
    if (res_->device == device) return Status::Ok();
    return InvalidArgument("buffers on CUDA device " + std::to_string(device) +
                           ", but this communicator's device buffers are on device " + std::to_string(res_->device) +
                           " (one device per communicator)");
  }
  if (!init_error_.ok()) return init_error_;
  Result<cuda::DeviceGuard> on_device = cuda::DeviceGuard::Set(device);
  if (!on_device.ok()) return on_device.status();
  // Our kernels are loaded before any semaphore holds a stream (LoadKernels says why).
  if (Status st = cuda::LoadKernels(); !st.ok()) {
    init_error_ = st.WithContext("setting up device-buffer staging");
    return init_error_;
  }
  auto res = std::make_unique<Resources>();
  res->device = device;
  Result<cuda::StreamSemaphore> semaphore = cuda::StreamSemaphore::Create();
  Result<cuda::CopyStream> c1 = cuda::CopyStream::Create();
  Result<cuda::CopyStream> c2 = cuda::CopyStream::Create();
  Result<cuda::CopyStream> b1 = cuda::CopyStream::Create();
  Result<cuda::CopyStream> b2 = cuda::CopyStream::Create();
  for (const Status& st : {semaphore.status(), c1.status(), c2.status(), b1.status(), b2.status()}) {
    if (!st.ok()) {
      init_error_ = st.WithContext("setting up device-buffer staging");
      return init_error_;
    }
  }
  if (signals_) {
    Result<cuda::SignalFlags> flags = cuda::SignalFlags::Create(SignalView::FlagsFor(kMaxSignalSegments));
    Result<cuda::CopyStream> c3 = cuda::CopyStream::Create();
    if (flags.ok() && c3.ok()) {
      res->flags = std::move(flags.value());
      res->signalled.copies = std::move(c3.value());
    } else {
      CHORUS_WARN("CHORUS_STAGING_SYNC=signals: "
                  << (flags.ok() ? c3.status() : flags.status()).message()
                  << "; staged calls hold their stream with the semaphore wait kernel instead");
    }
  }
  // The program's own kernels cannot be: say what a first launch behind a semaphore does
  // (signal flags hold no stream behind a kernel).
  static std::atomic<bool> warned{false};
  if (!res->flags.valid() && cuda::LazyLoading() && !warned.exchange(true)) {
    CHORUS_WARN(
        "CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING=LAZY, the default): a kernel launched "
        "for the first time while a staged chorus call holds its stream waits for that call, and the call's "
        "copies wait for the loading, until the call's timeout. Set CUDA_MODULE_LOADING=EAGER (or use "
        "CHORUS_STAGING_SYNC=signals, the default, where the driver allows it), or launch each kernel once "
        "before the first collective on device buffers across hosts");
  }
  res->semaphore = std::move(semaphore.value());
  res->executor.copies = std::move(c1.value());
  res->caller.copies = std::move(c2.value());
  res->executor.back = std::move(b1.value());
  res->caller.back = std::move(b2.value());
  res_ = std::move(res);
  return Status::Ok();
}

Status DeviceCalls::Stage(Staging& s, const DeviceIo& io, const HostBuffers& host, const HostRun& run,
                          Deadline deadline) {
  const auto* send = static_cast<const char*>(io.send);
  auto* recv = static_cast<char*>(io.recv);
  char* host_send = host.send;
  char* host_recv = host.recv;
  if (!io.streamed) {
    CHORUS_RETURN_IF_ERROR(s.copies.Copy(host_send, send, io.send_bytes, deadline));
    CHORUS_RETURN_IF_ERROR(run(host_send, host_recv, nullptr));
    return s.copies.Copy(recv, host_recv, io.recv_bytes, deadline);
  }
  CudaCopies to_host(s.copies), to_device(s.back);
  StagingPipeline pipeline(to_host, to_device, kStagingSegment, deadline);
  Status st = pipeline.BeginInput(host_send, send, io.send_bytes);
  pipeline.SetOutput(recv, host_recv, io.recv_bytes);
  if (st.ok()) st = run(host_send, host_recv, &pipeline);
  Status done = pipeline.Finish(st.ok());
  return st.ok() ? done : st;
}

Status DeviceCalls::StageAll(Staging& s, const StagedRuns& windows, const HostBuffers& host, int64_t timeout_ms) {
  for (const StagedWindow& w : windows) {
    CHORUS_RETURN_IF_ERROR(Stage(s, w.io, host, w.run, Deadline::AfterMs(timeout_ms)));
  }
  return Status::Ok();
}

Work DeviceCalls::Enqueue(void* stream, StagedRuns windows, Executor& executor, int64_t timeout_ms, std::string what,
                          const std::function<void(const Status&)>& broken) {
  staged_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  auto fail = [&](const Status& st) {
    Status why = st.WithContext(what);
    broken(why);
    return Work::Failed(why);
  };
  if (cuda::IsCapturing(stream)) {
    return fail(InvalidArgument("the stream is being captured into a CUDA graph; chorus's calls cannot be captured"));
  }
  if (windows.empty()) return fail(InternalError("no window to stage"));
  const DeviceIo& io = windows.front().io;  // the largest: the bounce buffers' size
  // Everything runs on the buffers' device (the executor's thread has no current device of its own).
  Result<int> device = DeviceOfIo(io);
  if (!device.ok()) return fail(device.status());
  Result<cuda::DeviceGuard> on_device = cuda::DeviceGuard::Set(device.value());
  if (!on_device.ok()) return fail(on_device.status());
  Status st = Init(device.value());
  if (!st.ok()) return fail(st);
  if (res_->flags.valid()) return EnqueueSignalled(stream, std::move(windows), executor, timeout_ms, what, fail);
  // The pinned bounce buffers are made here, not in the task (which holds a semaphore).
  Result<HostBuffers> host = res_->executor.Reserve(io);
  if (!host.ok()) return fail(host.status());
  Result<cuda::StreamEvent> event = cuda::StreamEvent::Record(stream);
  if (!event.ok()) return fail(event.status());
  const uint64_t seq = next_seq_ + 1;
  // The semaphore wait kernel gives up by itself after a little more than the task's timeout, so
  // a stream is never held for ever; if it gives up first, the task fails (Expired).
  st = res_->semaphore.EnqueueWait(stream, seq, timeout_ms + 10000);
  if (!st.ok()) return fail(st);  // nothing was enqueued: the next call takes seq
  next_seq_ = seq;
  auto state = std::make_shared<TaskState>(std::chrono::milliseconds(timeout_ms));
  Resources* res = res_.get();
  auto shared_event = std::make_shared<cuda::StreamEvent>(std::move(event.value()));
  executor.Post(
      [res, host = host.value(), windows = std::move(windows), shared_event, seq, device = device.value(), timeout_ms,
       what = std::move(what)]() {
        Status st = cuda::SetDevice(device);
        if (st.ok()) {
          st = shared_event->Wait(Deadline::AfterMs(timeout_ms),
                                  "waiting for the work enqueued before it on the caller's stream");
        }
        if (st.ok()) st = StageAll(res->executor, windows, host, timeout_ms);
        if (st.ok() && res->semaphore.Expired(seq)) {
          st = Status(StatusCode::kTimeout,
                      "the caller's stream went on without this call: its semaphore gave up after " +
                          std::to_string(timeout_ms / 1000 + 10) +
                          " s waiting (the outputs there are not the results; a kernel launched "
                          "for the first time meanwhile waits for the whole device under CUDA's "
                          "lazy loading: CUDA_MODULE_LOADING=EAGER avoids that)");
        }
        res->semaphore.Release(seq);  // success or not: the stream goes on
        return st.ok() ? st : st.WithContext(what);
      },
      state);
  return Work(state);
}

Work DeviceCalls::EnqueueSignalled(void* stream, StagedRuns windows, Executor& executor, int64_t timeout_ms,
                                   std::string what, const std::function<Work(const Status&)>& fail) {
  signalled_.fetch_add(1);
  Resources& res = *res_;
  Result<HostBuffers> host = res.signalled.Reserve(windows.front().io);  // sized for the largest window
  if (!host.ok()) return fail(host.status());
  const SignalView view = res.view();
  void* copies = res.signalled.copies.get();
  // The input copies wait for what the caller enqueued before the call.
  Result<cuda::StreamEvent> event = cuda::StreamEvent::Record(stream);
  Status st = event.ok() ? event->EnqueueWaitOn(copies) : event.status();
  std::vector<SignalledWindow> plan;
  for (size_t i = 0; i < windows.size() && st.ok(); ++i) {
    res.seq = NextSeq(res.seq);
    plan.push_back(PlanWindow(windows[i].io, res.seq, kStagingSegment, kMaxSignalSegments));
    Result<cuda::StreamEvent> landed = EnqueueWindowCopies(res.flags, view, plan.back(), res.landed.get(),
                                                           windows[i].io, host->send, host->recv, copies, stream);
    st = landed.status();
    if (st.ok()) res.landed = std::make_shared<cuda::StreamEvent>(std::move(landed.value()));
  }
  if (!st.ok()) {
    for (const SignalledWindow& w : plan) ReleaseWindow(view, w);  // what was enqueued goes on
    return fail(st);
  }
  auto unrun = std::make_shared<ReleaseUnrun>();
  unrun->view = view;
  unrun->plan = plan;
  auto state = std::make_shared<TaskState>(std::chrono::milliseconds(timeout_ms));
  executor.Post(
      [view, plan, windows = std::move(windows), host = host.value(), unrun, timeout_ms, what = std::move(what)]() {
        unrun->ran = true;  // from here every window is released below, whatever happens
        Status st = Status::Ok();
        for (size_t i = 0; i < plan.size(); ++i) {
          if (!st.ok()) {
            ReleaseWindow(view, plan[i]);
            continue;
          }
          st = RunSignalledWindow(view, plan[i], windows[i].io, windows[i].run, host.send, host.recv,
                                  Deadline::AfterMs(timeout_ms));
        }
        // The Work ends with the operation: the last window's results are on the device.
        Status landed = view.WaitReached(SignalView::kLanded, plan.back().seq, Deadline::AfterMs(timeout_ms),
                                         "the results' copy back to the device");
        if (st.ok()) st = landed;
        return st.ok() ? st : st.WithContext(what);
      },
      state);
  return Work(state);
}

int DeviceCalls::device() const { return res_ ? res_->device : -1; }

Status DeviceCalls::Ready(const DeviceIo& io) {
  Result<int> device = DeviceOfIo(io);
  if (!device.ok()) return device.status();
  std::lock_guard<std::mutex> lock(mu_);
  return Init(device.value());
}

Status DeviceCalls::RunNow(const StagedRuns& windows, int64_t timeout_ms, bool on_executor) {
  staged_.fetch_add(1);
  if (windows.empty()) return InternalError("no window to stage");
  const DeviceIo& io = windows.front().io;  // the largest: the bounce buffers' size
  // On the buffers' device (the calling thread may be the executor's, with none of its own).
  Result<int> device = DeviceOfIo(io);
  if (!device.ok()) return device.status();
  Result<cuda::DeviceGuard> on_device = cuda::DeviceGuard::Set(device.value());
  if (!on_device.ok()) return on_device.status();
  Result<HostBuffers> host = HostBuffers{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHORUS_RETURN_IF_ERROR(Init(device.value()));
    // The executor's own set (its tasks run one at a time, and stream-form calls grow it
    // under mu_ only): a queued host-form call never waits for the callers' set, whose
    // holder may be waiting for this very call on a peer.
    if (on_executor) host = res_->executor.Reserve(io);
  }
  if (on_executor) {
    if (!host.ok()) return host.status();
    return StageAll(res_->executor, windows, host.value(), timeout_ms);
  }
  std::lock_guard<std::mutex> lock(caller_mu_);
  host = res_->caller.Reserve(io);
  if (!host.ok()) return host.status();
  return StageAll(res_->caller, windows, host.value(), timeout_ms);
}

}  // namespace chorus::internal
