#include "common/env.h"

#include <strings.h>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace chorus {

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

EnvLookup MapEnv(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

Result<int64_t> EnvInt(const EnvLookup& env, const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  std::optional<std::string> v = env(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(v->c_str(), &end, 10);
  while (end != nullptr && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (errno != 0 || end == v->c_str() || *end != '\0') {
    return InvalidArgument(name + "='" + *v + "' is not an integer");
  }
  if (parsed < min || parsed > max) {
    return InvalidArgument(name + "=" + *v + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) +
                           "]");
  }
  return static_cast<int64_t>(parsed);
}

Result<std::string> EnvChoice(const EnvLookup& env, const std::string& name, const std::string& fallback,
                              std::initializer_list<const char*> allowed) {
  std::optional<std::string> v = env(name);
  if (!v) return fallback;
  std::string list;
  for (const char* a : allowed) {
    if (strcasecmp(a, v->c_str()) == 0) return std::string(a);
    list += (list.empty() ? "" : "|") + std::string(a);
  }
  return InvalidArgument(name + "='" + *v + "' is not one of " + list);
}

Result<uint64_t> ParseUnsigned(const std::string& what, const std::string& text) {
  const std::string shown = text.substr(0, 64);  // the text may be anyone's, of any length
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument(what + " '" + shown + "' is not an unsigned integer");
  }
  uint64_t v = 0;
  for (char c : text) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return InvalidArgument(what + " '" + shown + "' is larger than 2^64-1");
    v = v * 10 + d;
  }
  return v;
}

Result<int64_t> ParseByteSize(const std::string& name, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || n < 0) {
    return InvalidArgument(name + "='" + text + "' is not a byte size (e.g. 4M, 512K, 1048576)");
  }
  int64_t mult = 1;
  std::string suffix(end);
  if (suffix == "" || suffix == "B" || suffix == "b")
    mult = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB")
    mult = 1LL << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    mult = 1LL << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    mult = 1LL << 30;
  else
    return InvalidArgument(name + "='" + text + "' has an unknown size suffix '" + suffix + "'");
  if (n > INT64_MAX / mult) return InvalidArgument(name + "='" + text + "' is too large a byte size");
  return static_cast<int64_t>(n) * mult;
}

}  // namespace chorus
