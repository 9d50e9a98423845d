#include "common/log.h"

#include <unistd.h>

#include <strings.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace chorus {
namespace {

std::atomic<int> g_log_rank{-1};

LogLevel ParseLevel(const char* v) {
  if (v == nullptr || *v == '\0') return LogLevel::kWarn;
  if (strcasecmp(v, "TRACE") == 0) return LogLevel::kTrace;
  if (strcasecmp(v, "INFO") == 0) return LogLevel::kInfo;
  if (strcasecmp(v, "WARN") == 0 || strcasecmp(v, "WARNING") == 0) return LogLevel::kWarn;
  if (strcasecmp(v, "ERROR") == 0 || strcasecmp(v, "NONE") == 0) return LogLevel::kError;
  std::fprintf(stderr, "[chorus] CHORUS_DEBUG=%s is not one of WARN, INFO, TRACE; using WARN\n", v);
  return LogLevel::kWarn;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

LogLevel CurrentLogLevel() {
  static const LogLevel level = ParseLevel(std::getenv("CHORUS_DEBUG"));
  return level;
}

void SetLogRank(int rank) { g_log_rank.store(rank); }

void LogLine(LogLevel level, const std::string& text) {
  static const std::string host = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) std::strcpy(buf, "?");
    return std::string(buf);
  }();
  std::string line = "[chorus " + host + ":" + std::to_string(getpid()) + " rank " + std::to_string(g_log_rank.load()) +
                     " " + LevelName(level) + "] " + text + "\n";
  // One write per line so lines from threads and ranks do not interleave.
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace chorus
