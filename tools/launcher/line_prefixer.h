// Turns a byte stream into whole lines, each prefixed ("[rank 3] "), so that output
// of many ranks sharing one terminal never interleaves inside a line.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace chorus::launcher {

class LinePrefixer {
 public:
  // Lines longer than max_line are cut (and each piece prefixed) so that a rank
  // printing without newlines cannot make the launcher buffer without bound.
  explicit LinePrefixer(std::string prefix, size_t max_line = 1 << 20)
      : prefix_(std::move(prefix)), max_line_(max_line) {}

  // Consumes bytes; returns the complete prefixed lines they finish (maybe "").
  std::string Feed(const char* data, size_t len);
  // At end of stream: the pending partial line, prefixed and newline-terminated.
  std::string Flush();
  bool has_partial() const { return !pending_.empty(); }

 private:
  std::string prefix_;
  size_t max_line_;
  std::string pending_;
};

}  // namespace chorus::launcher
