// Flow control of early messages (sent before their receive was posted), the
// receiver's side, kept per peer by both transports: how many bytes it holds for that
// peer's receives not posted yet, and whether it told the peer to PAUSE. Above
// pause_above it must say PAUSE (the peer then sends only what a posted receive asked
// for: TCP rendezvous, RDMA RTS); below resume_below it may say RESUME.
#pragma once

#include <cstdint>

namespace chorus::transport {

constexpr uint64_t kDefaultPauseAbove = uint64_t{64} << 20;
constexpr uint64_t kDefaultResumeBelow = uint64_t{16} << 20;

class EarlyHold {
 public:
  // Counts `bytes` held; true when the peer must be told to PAUSE now.
  bool Add(uint64_t bytes, uint64_t pause_above) {
    held_ += bytes;
    if (pause_sent_ || held_ <= pause_above) return false;
    pause_sent_ = true;
    return true;
  }
  // Forgets `bytes`; true when the peer may be told to RESUME now.
  bool Remove(uint64_t bytes, uint64_t resume_below) {
    held_ -= bytes;
    if (!pause_sent_ || held_ >= resume_below) return false;
    pause_sent_ = false;
    return true;
  }

 private:
  uint64_t held_ = 0;
  bool pause_sent_ = false;
};

}  // namespace chorus::transport
