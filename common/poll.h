// Waiting for something another thread or a device sets, by polling: without sleeping
// for the first 200 us (a staging segment's copy, a small call's kernels, a flag about
// to be set: a sleep there costs more than the wait), then sleeping a little longer each
// time up to 100 us. For waits with no blocking form that takes a deadline.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "common/status.h"

namespace chorus {

// Until done() holds; a timeout error names `what` once the deadline passed.
template <typename Done>
Status PollUntil(Done done, Deadline deadline, const std::string& what) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  int sleep_us = 5;
  while (!done()) {
    if (deadline.expired()) return TimeoutError(what + ": not finished by the deadline");
    if (std::chrono::steady_clock::now() < spin_until) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    if (sleep_us < 100) sleep_us *= 2;
  }
  return Status::Ok();
}

}  // namespace chorus
