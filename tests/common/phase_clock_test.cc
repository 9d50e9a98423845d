#include "common/phase_clock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace chorus {
namespace {

// The milliseconds printed after `name` in `summary`.
double MsOf(const std::string& summary, const std::string& name) {
  const size_t at = summary.find(name + " ");
  EXPECT_NE(at, std::string::npos) << name << " in " << summary;
  return at == std::string::npos ? -1 : std::strtod(summary.c_str() + at + name.size() + 1, nullptr);
}

TEST(PhaseClock, NamesEachPhaseInOrderWithItsShareOfTheTotal) {
  PhaseClock clock;
  usleep(20 * 1000);
  clock.Mark("slow");
  clock.Mark("quick");
  const std::string s = clock.Summary();
  EXPECT_LT(s.find("slow "), s.find("quick ")) << s;
  EXPECT_LT(s.find("quick "), s.find("total ")) << s;
  EXPECT_GE(MsOf(s, "slow"), 20.0) << s;
  EXPECT_LE(MsOf(s, "quick"), MsOf(s, "slow")) << s;
  EXPECT_GE(MsOf(s, "total"), MsOf(s, "slow")) << s;
}

TEST(PhaseClock, NoPhasesIsJustTheTotal) { EXPECT_EQ(PhaseClock().Summary(), "total 0.0 ms"); }

}  // namespace
}  // namespace chorus
