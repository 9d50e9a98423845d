// Logging to stderr, filtered by CHORUS_DEBUG=WARN|INFO|TRACE (default WARN).
// Each line is prefixed with "[chorus host:pid rank R LEVEL]".
#pragma once

#include <sstream>
#include <string>

namespace chorus {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// The level read once from CHORUS_DEBUG.
LogLevel CurrentLogLevel();
inline bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(CurrentLogLevel()); }
// The rank shown in the prefix of this process's log lines (-1: not known yet).
void SetLogRank(int rank);
void LogLine(LogLevel level, const std::string& text);

}  // namespace chorus

#define CHORUS_LOG(level, expr)                                       \
  do {                                                                \
    if (::chorus::LogEnabled(::chorus::LogLevel::level)) {            \
      std::ostringstream _chorus_os;                                  \
      _chorus_os << expr;                                             \
      ::chorus::LogLine(::chorus::LogLevel::level, _chorus_os.str()); \
    }                                                                 \
  } while (0)

#define CHORUS_WARN(expr) CHORUS_LOG(kWarn, expr)
#define CHORUS_INFO(expr) CHORUS_LOG(kInfo, expr)
#define CHORUS_TRACE(expr) CHORUS_LOG(kTrace, expr)
