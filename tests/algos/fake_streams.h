// Two threads standing in for the CUDA streams of a staged call with signal flags
// (chorus/signalled_staging.h): the staging stream copies the input to the host segment
// by segment and sets each IN flag; the caller's stream waits for each OUT flag and
// copies the segment back, then waits for DONE and sets LANDED. Over ordinary memory, so
// the task's side runs its real logic without a GPU. The staging stream's wait for the
// previous window (an event on a GPU) is a wait for LANDED here.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "chorus/signalled_staging.h"

namespace chorus::testing {

class FakeStreams {
 public:
  // `prev`: the previous window's seq (0: none). `copy_ok` false: the staging stream
  // never signals its segments. `on_landed` runs just before LANDED is set. Each copy
  // takes `copy_time`, so a task that reads before it waited sees stale bytes.
  FakeStreams(
      const internal::SignalView& v, const internal::SignalledWindow& w, uint32_t prev, const internal::DeviceIo& io,
      char* host_send, const char* host_recv, bool copy_ok = true, std::function<void()> on_landed = [] {},
      std::chrono::microseconds copy_time = std::chrono::microseconds(200)) {
    using internal::SignalView;
    copy_ = std::thread([=] {
      // Reached, not equal: with nothing to copy the caller's thread may already have
      // set LANDED to this window's seq (a wait for equality then sat out its 20 s).
      if (!v.WaitReached(SignalView::kLanded, prev, Deadline::AfterMs(20000), "landed").ok() || !copy_ok) return;
      for (size_t k : w.in_order) {
        const size_t off = k * w.segment, n = std::min(w.segment, io.send_bytes - off);
        std::this_thread::sleep_for(copy_time);
        std::memcpy(host_send + off, static_cast<const char*>(io.send) + off, n);
        v.Store(v.In(k), w.seq);
      }
    });
    caller_ = std::thread([=] {
      for (size_t k = 0; k < w.out_segments; ++k) {
        if (!v.WaitFor(v.Out(k), w.seq, Deadline::AfterMs(20000), "out").ok()) return;
        const size_t off = k * w.segment, n = std::min(w.segment, io.recv_bytes - off);
        std::memcpy(static_cast<char*>(io.recv) + off, host_recv + off, n);
      }
      if (!v.WaitReached(SignalView::kDone, w.seq, Deadline::AfterMs(20000), "done").ok()) return;
      on_landed();
      v.Store(SignalView::kLanded, w.seq);
    });
  }
  FakeStreams(const FakeStreams&) = delete;
  FakeStreams& operator=(const FakeStreams&) = delete;
  ~FakeStreams() { Join(); }
  void Join() {
    if (copy_.joinable()) copy_.join();
    if (caller_.joinable()) caller_.join();
  }

 private:
  std::thread copy_, caller_;
};

}  // namespace chorus::testing
