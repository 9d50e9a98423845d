// Splits a span of wall time into named phases, for one log line that says where
// communicator set-up spends its time ("claim 1.2 ms, peers 30.1 ms, ..., total 40.0 ms").
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"

namespace chorus {

class PhaseClock {
 public:
  PhaseClock() : start_(Clock::now()), last_(start_) {}

  // Ends the phase under way, calling it `name`; the next one starts now.
  void Mark(std::string name) {
    const Clock::time_point now = Clock::now();
    phases_.emplace_back(std::move(name), Ms(now - last_));
    last_ = now;
  }

  // "name ms, ..., total ms" of the phases marked so far.
  std::string Summary() const {
    std::string s;
    for (const auto& [name, ms] : phases_) s += name + " " + Format(ms) + ", ";
    return s + "total " + Format(Ms(last_ - start_));
  }

 private:
  static double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
  static std::string Format(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f ms", ms);
    return buf;
  }

  Clock::time_point start_;
  Clock::time_point last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace chorus
