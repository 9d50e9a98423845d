// Every blocking wait in chorus takes a Deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace chorus {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline After(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  static Deadline AfterMs(int64_t ms) { return After(std::chrono::milliseconds(ms)); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, never negative; capped so it fits in an int (poll/epoll timeouts).
  int RemainingMs() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    if (left > 1 << 30) return 1 << 30;
    return static_cast<int>(left);
  }
  Deadline Earlier(Deadline other) const { return other.at_ < at_ ? other : *this; }

 private:
  Clock::time_point at_;
};

}  // namespace chorus
