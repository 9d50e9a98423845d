// A deadline for calls that cannot be given one (NCCL's blocking init and the stream
// wait behind each NCCL call): armed around such a call, it ends the process with a
// message naming the call when the call outlives its time, instead of a silent hang
// (a peer that died leaves NCCL waiting for ever).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace chorus {
namespace perf {

class Watchdog {
 public:
  // `who` prefixes the message ("rank 1").
  explicit Watchdog(std::string who);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // From now until Disarm, `what` must finish within `limit`, else the process exits (1).
  void Arm(const std::string& what, std::chrono::milliseconds limit);
  void Disarm();

 private:
  void Run();

  const std::string who_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stop_ = false;
  std::string what_;
  std::chrono::milliseconds limit_{0};
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

// Arms `dog` for one scope.
class Armed {
 public:
  Armed(Watchdog& dog, const std::string& what, std::chrono::milliseconds limit) : dog_(dog) { dog_.Arm(what, limit); }
  ~Armed() { dog_.Disarm(); }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

 private:
  Watchdog& dog_;
};

}  // namespace perf
}  // namespace chorus
