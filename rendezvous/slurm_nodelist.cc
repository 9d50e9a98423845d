#include "rendezvous/slurm_nodelist.h"

#include <cctype>
#include <cstdint>

#include "common/env.h"

namespace chorus::rendezvous {
namespace {

// Splits at commas outside brackets.
Result<std::vector<std::string>> SplitTopLevel(const std::string& list) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char ch : list) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (depth < 0 || depth > 1) {
      return InvalidArgument("SLURM node list '" + list + "' has unbalanced or nested brackets");
    }
    if (ch == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) return InvalidArgument("SLURM node list '" + list + "' has an unclosed '['");
  parts.push_back(cur);
  return parts;
}

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Pad(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// The values of one bracket body "01-04,07".
Result<std::vector<std::string>> ExpandRanges(const std::string& body, const std::string& list, size_t max) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = item.find('-');
    std::string lo_s = item.substr(0, dash);
    std::string hi_s = dash == std::string::npos ? lo_s : item.substr(dash + 1);
    if (!AllDigits(lo_s) || !AllDigits(hi_s)) {
      return InvalidArgument("SLURM node list '" + list + "' has a bad range '" + item + "'");
    }
    Result<uint64_t> lo = ParseUnsigned("SLURM node list '" + list + "' number", lo_s);
    if (!lo.ok()) return lo.status();
    Result<uint64_t> hi = ParseUnsigned("SLURM node list '" + list + "' number", hi_s);
    if (!hi.ok()) return hi.status();
    if (hi.value() < lo.value()) {
      return InvalidArgument("SLURM node list '" + list + "' has a decreasing range '" + item + "'");
    }
    const uint64_t extra = hi.value() - lo.value();  // hosts past the first
    if (extra >= max || out.size() + extra >= max) {
      return InvalidArgument("SLURM node list '" + list + "' expands to more than " + std::to_string(max) + " hosts");
    }
    // Counted from lo, not up to hi: hi may be 2^64-1.
    for (uint64_t k = 0; k <= extra; ++k) out.push_back(Pad(lo.value() + k, lo_s.size()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Expands one name with any number of bracket groups.
Status ExpandName(const std::string& name, const std::string& list, size_t max, std::vector<std::string>* out) {
  std::vector<std::string> acc = {""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    std::string literal = name.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (literal.find(']') != std::string::npos) {
      return InvalidArgument("SLURM node list '" + list + "' has a ']' without '['");
    }
    for (auto& a : acc) a += literal;
    if (open == std::string::npos) break;
    size_t close = name.find(']', open);
    if (close == std::string::npos) return InvalidArgument("SLURM node list '" + list + "' has an unclosed '['");
    Result<std::vector<std::string>> values = ExpandRanges(name.substr(open + 1, close - open - 1), list, max);
    if (!values.ok()) return values.status();
    if (acc.size() * values.value().size() + out->size() > max) {
      return InvalidArgument("SLURM node list '" + list + "' expands to more than " + std::to_string(max) + " hosts");
    }
    std::vector<std::string> next;
    for (const auto& a : acc) {
      for (const auto& v : values.value()) next.push_back(a + v);
    }
    acc.swap(next);
    i = close + 1;
  }
  for (auto& a : acc) out->push_back(std::move(a));
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ExpandSlurmNodelist(const std::string& nodelist, size_t max_hosts) {
  std::string list;
  for (char c : nodelist) {
    if (!std::isspace(static_cast<unsigned char>(c))) list += c;
  }
  if (list.empty()) return InvalidArgument("SLURM node list is empty");
  Result<std::vector<std::string>> parts = SplitTopLevel(list);
  if (!parts.ok()) return parts.status();
  std::vector<std::string> hosts;
  for (const auto& part : parts.value()) {
    if (part.empty() || part[0] == '[') {
      return InvalidArgument("SLURM node list '" + nodelist + "' has an empty host name");
    }
    CHORUS_RETURN_IF_ERROR(ExpandName(part, nodelist, max_hosts, &hosts));
  }
  return hosts;
}

Result<std::string> FirstSlurmHost(const std::string& nodelist) {
  // Expanding with a cap of one host is not possible (the first group may be large),
  // so expand only the first top-level entry with each range cut to its lower bound.
  std::string list;
  for (char c : nodelist) {
    if (!std::isspace(static_cast<unsigned char>(c))) list += c;
  }
  Result<std::vector<std::string>> parts = SplitTopLevel(list);
  if (!parts.ok()) return parts.status();
  const std::string& first = parts.value()[0];
  std::string simplified;
  for (size_t i = 0; i < first.size(); ++i) {
    simplified += first[i];
    if (first[i] != '[') continue;
    size_t close = first.find(']', i);
    if (close == std::string::npos) break;  // reported by the expansion below
    std::string body = first.substr(i + 1, close - i - 1);
    simplified += body.substr(0, body.find_first_of(",-")) + "]";
    i = close;
  }
  Result<std::vector<std::string>> hosts = ExpandSlurmNodelist(simplified.empty() ? nodelist : simplified, 1);
  if (!hosts.ok()) return Status(hosts.status().code(), hosts.status().message());
  return hosts.value()[0];
}

}  // namespace chorus::rendezvous
