// Prints the settings table (chorus/config.cc) as Markdown, or with --write-readme
// replaces the table in the workspace's README.md between its settings markers.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "chorus/config.h"

namespace {

constexpr char kBegin[] = "<!-- settings:begin -->";
constexpr char kEnd[] = "<!-- settings:end -->";

int WriteReadme() {
  const char* root = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // set by `bazel run`
  const std::string path = std::string(root ? root : ".") + "/README.md";
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "settings_table: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string readme = text.str();
  const size_t begin = readme.find(kBegin);
  const size_t end = readme.find(kEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    std::fprintf(stderr, "settings_table: %s has no %s ... %s markers\n", path.c_str(), kBegin, kEnd);
    return 1;
  }
  const size_t from = begin + std::strlen(kBegin);
  readme.replace(from, end - from, "\n" + chorus::SettingsMarkdown());
  std::ofstream out(path, std::ios::trunc);
  out << readme;
  if (!out) {
    std::fprintf(stderr, "settings_table: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("settings_table: wrote the table into %s\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--write-readme") == 0) return WriteReadme();
  if (argc != 1) {
    std::fprintf(stderr, "usage: settings_table [--write-readme]\n");
    return 2;
  }
  std::fputs(chorus::SettingsMarkdown().c_str(), stdout);
  return 0;
}
