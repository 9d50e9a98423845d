// README.md's settings table, between its settings markers, is the one the code
// generates (chorus/config.cc): the table a user reads is the one the parser uses.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "chorus/config.h"

namespace chorus {
namespace {

TEST(SettingsTable, ReadmeHasTheGeneratedTable) {
  std::ifstream in("README.md");  // the test's runfiles: the workspace's root
  ASSERT_TRUE(in) << "README.md is not among the test's data";
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string begin = "<!-- settings:begin -->", end = "<!-- settings:end -->";
  const size_t b = readme.find(begin);
  const size_t e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "README.md has no " << begin << " marker";
  ASSERT_NE(e, std::string::npos) << "README.md has no " << end << " marker";
  ASSERT_LT(b, e) << end << " comes before " << begin << " in README.md";
  const std::string in_readme = readme.substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(in_readme, "\n" + SettingsMarkdown())
      << "README.md's settings table differs from the code's (chorus/config.cc); regenerate it with\n"
         "  bazel run //chorus:settings_table -- --write-readme";
}

}  // namespace
}  // namespace chorus
