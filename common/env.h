// Reading environment variables with errors that name the variable and the bad value.
// The lookup is injectable so that parsing is unit-testable without touching the
// process environment.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"

namespace chorus {

// Returns the value of a variable, or nullopt when unset. Empty counts as unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

EnvLookup ProcessEnv();                                       // getenv
EnvLookup MapEnv(std::map<std::string, std::string> values);  // for tests

// Parses an integer variable; `fallback` when unset; an error naming the variable
// when the value is not an integer in [min, max].
Result<int64_t> EnvInt(const EnvLookup& env, const std::string& name, int64_t fallback, int64_t min = INT64_MIN,
                       int64_t max = INT64_MAX);
// Parses a string variable restricted to `allowed` (case-insensitive); returned lowercased.
Result<std::string> EnvChoice(const EnvLookup& env, const std::string& name, const std::string& fallback,
                              std::initializer_list<const char*> allowed);
// Parses a decimal unsigned integer from text that may come from anywhere (a variable,
// the store, a peer): an error naming `what` when it is empty, not all digits or past
// 2^64-1, never an exception.
Result<uint64_t> ParseUnsigned(const std::string& what, const std::string& text);
// Parses a size with an optional K/M/G suffix (powers of 1024): "512K", "4M", "1048576".
Result<int64_t> ParseByteSize(const std::string& name, const std::string& text);

}  // namespace chorus
