#include "tools/launcher/line_prefixer.h"

#include <cstring>

namespace chorus::launcher {

std::string LinePrefixer::Feed(const char* data, size_t len) {
  std::string out;
  for (size_t i = 0; i < len;) {
    const void* nl = std::memchr(data + i, '\n', len - i);
    size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - data) : len;
    pending_.append(data + i, end - i);
    i = end;
    if (nl) {
      ++i;
      out += prefix_ + pending_ + "\n";
      pending_.clear();
    } else if (pending_.size() >= max_line_) {
      out += prefix_ + pending_ + "\n";
      pending_.clear();
    }
  }
  return out;
}

std::string LinePrefixer::Flush() {
  if (pending_.empty()) return "";
  std::string out = prefix_ + pending_ + "\n";
  pending_.clear();
  return out;
}

}  // namespace chorus::launcher
