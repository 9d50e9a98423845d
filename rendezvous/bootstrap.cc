#include "rendezvous/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "rendezvous/net_util.h"
#include "rendezvous/socket_io.h"

namespace chorus::rendezvous {
namespace {

constexpr const char* kPeerHeader = "chorus-peer 1";
constexpr size_t kMaxPeerInfoBytes = 1 << 20;

Status CheckRank(const char* what, int rank, int size) {
  if (size < 1) return InvalidArgument(std::string(what) + ": size " + std::to_string(size) + " must be positive");
  if (rank < 0 || rank >= size) {
    return InvalidArgument(std::string(what) + ": rank " + std::to_string(rank) + " is not in [0, " +
                           std::to_string(size) + ")");
  }
  return Status::Ok();
}

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

// After a timeout: which of `keys` (one per rank) are absent. Empty when the store
// cannot be asked any more (the connection broke).
// When the store is gone (its host gave up first), the keys the timed-out wait named
// in `cause` still say who was missing.
std::vector<int> MissingRanks(Store& store, const std::vector<std::string>& keys, const Status& cause) {
  std::vector<int> missing;
  for (size_t r = 0; r < keys.size(); ++r) {
    Result<bool> there = store.Check({keys[r]});
    if (!there.ok()) {
      missing.clear();
      for (size_t k = 0; k < keys.size(); ++k) {
        if (cause.message().find("'" + keys[k] + "'") != std::string::npos) missing.push_back(static_cast<int>(k));
      }
      return missing;
    }
    if (!there.value()) missing.push_back(static_cast<int>(r));
  }
  return missing;
}

Status NeverArrived(const std::string& what, const std::vector<int>& missing, int size, int64_t waited_ms,
                    const Status& cause) {
  if (missing.empty()) return cause.WithContext(what);
  return TimeoutError(what + ": " + (missing.size() == 1 ? "rank " : "ranks ") + FormatRankList(missing) + " of " +
                      std::to_string(size) + " never arrived within " + FormatDuration(waited_ms));
}

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '%' || c == '\n' || c == '\r' || c == '\0') {
      static const char* hex = "0123456789ABCDEF";
      out += '%';
      out += hex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += hex[static_cast<unsigned char>(c) & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

bool Unescape(const std::string& v, std::string* out) {
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '%') {
      *out += v[i];
      continue;
    }
    if (i + 2 >= v.size()) return false;
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nib(v[i + 1]), lo = nib(v[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

bool ParseInt(const std::string& s, int64_t min, int* out) {
  if (s.empty() || s.size() > 12) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string FormatRankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

Result<std::vector<std::string>> AllGather(Store& store, const std::string& prefix, int rank, int size,
                                           const std::string& mine, Deadline deadline) {
  const std::string what = "all-gather '" + prefix + "' (rank " + std::to_string(rank) + ")";
  CHORUS_RETURN_IF_ERROR(CheckRank(what.c_str(), rank, size));
  const auto start = Clock::now();
  std::vector<std::string> keys;
  keys.reserve(size);
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "/" + std::to_string(r));
  Status st = store.Set(keys[rank], mine);
  if (!st.ok()) return st.WithContext(what);
  Result<std::vector<std::string>> all = store.MultiGet(keys, std::chrono::milliseconds(deadline.RemainingMs()));
  if (all.ok()) return all;
  if (all.status().code() != StatusCode::kTimeout) return all.status().WithContext(what);
  return NeverArrived(what, MissingRanks(store, keys, all.status()), size, ElapsedMs(start), all.status());
}

Status Barrier(Store& store, const std::string& prefix, int rank, int size, Deadline deadline) {
  const std::string what = "barrier '" + prefix + "' (rank " + std::to_string(rank) + ")";
  CHORUS_RETURN_IF_ERROR(CheckRank(what.c_str(), rank, size));
  const auto start = Clock::now();
  Result<int64_t> count = store.Add(prefix + "/count", 1);
  if (!count.ok()) return count.status().WithContext(what);
  // Arrival n (1-based) belongs to round (n-1)/size: the prefix can be reused.
  const std::string round = prefix + "/" + std::to_string((count.value() - 1) / size);
  Status st = store.Set(round + "/arrived/" + std::to_string(rank), "");
  if (!st.ok()) return st.WithContext(what);
  if (count.value() % size == 0) {
    st = store.Set(round + "/done", "");
    return st.WithContext(what);
  }
  Result<std::string> done = store.Get(round + "/done", std::chrono::milliseconds(deadline.RemainingMs()));
  if (done.ok()) return Status::Ok();
  if (done.status().code() != StatusCode::kTimeout) return done.status().WithContext(what);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(round + "/arrived/" + std::to_string(r));
  return NeverArrived(what, MissingRanks(store, keys, done.status()), size, ElapsedMs(start), done.status());
}

std::map<std::string, HostShare> HostShares(const std::vector<PeerInfo>& peers) {
  std::map<std::string, HostShare> hosts;
  std::map<std::string, int> on_machine;
  for (const PeerInfo& p : peers) {
    HostShare& h = hosts[p.host_id];
    ++h.ranks;
    h.cores = std::max(h.cores, p.cores);
    if (!p.machine.empty()) ++on_machine[p.machine];
  }
  for (const PeerInfo& p : peers) {
    HostShare& h = hosts[p.host_id];
    h.machine_ranks = std::max({h.machine_ranks, h.ranks, p.machine.empty() ? 0 : on_machine[p.machine]});
  }
  return hosts;
}

std::string PeerInfo::Serialize() const {
  std::string out = std::string(kPeerHeader) + "\n";
  out += "rank=" + std::to_string(rank) + "\n";
  out += "hostname=" + Escape(hostname) + "\n";
  out += "host_id=" + Escape(host_id) + "\n";
  out += "pid=" + std::to_string(pid) + "\n";
  out += "tcp=" + Escape(tcp_address) + "\n";
  if (!rdma_address.empty()) out += "rdma=" + Escape(rdma_address) + "\n";
  if (!rdma_unavailable.empty()) out += "rdma_unavailable=" + Escape(rdma_unavailable) + "\n";
  for (const auto& i : interfaces) out += "if=" + Escape(i) + "\n";
  if (cuda_ipc_off) out += "cuda_ipc=off\n";
  if (cores > 0) out += "cores=" + std::to_string(cores) + "\n";
  if (!machine.empty()) out += "machine=" + Escape(machine) + "\n";
  if (tcp_lanes > 0) out += "tcp_lanes=" + std::to_string(tcp_lanes) + "\n";
  if (!pid_ns.empty()) out += "pid_ns=" + Escape(pid_ns) + "\n";
  if (shm != Shm::kNo) out += std::string("shm=") + (shm == Shm::kNeed ? "need" : "want") + "\n";
  return out;
}

Result<PeerInfo> PeerInfo::Parse(const std::string& text) {
  if (text.size() > kMaxPeerInfoBytes) {
    return ProtocolError("peer info of " + std::to_string(text.size()) + " bytes is larger than the 1 MiB limit");
  }
  size_t pos = text.find('\n');
  if (pos == std::string::npos || text.compare(0, pos, kPeerHeader) != 0) {
    return ProtocolError("peer info does not start with '" + std::string(kPeerHeader) + "' (got '" +
                         Escape(text.substr(0, std::min<size_t>(pos, 32))) + "')");
  }
  PeerInfo info;
  bool has_rank = false, has_pid = false, has_host = false, has_id = false;
  size_t start = pos + 1;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) return ProtocolError("peer info is truncated (last line has no newline)");
    std::string line = text.substr(start, end - start);
    start = end + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      return ProtocolError("peer info line '" + Escape(line) + "' is not key=value");
    std::string key = line.substr(0, eq), value;
    if (!Unescape(line.substr(eq + 1), &value)) {
      return ProtocolError("peer info line '" + Escape(line) + "' has a bad % escape");
    }
    if (key == "rank") {
      if (!ParseInt(value, 0, &info.rank)) return ProtocolError("peer info rank '" + Escape(value) + "' is not a rank");
      has_rank = true;
    } else if (key == "pid") {
      if (!ParseInt(value, 0, &info.pid)) return ProtocolError("peer info pid '" + Escape(value) + "' is not a pid");
      has_pid = true;
    } else if (key == "hostname") {
      info.hostname = value;
      has_host = true;
    } else if (key == "host_id") {
      info.host_id = value;
      has_id = true;
    } else if (key == "tcp") {
      info.tcp_address = value;
    } else if (key == "rdma") {
      info.rdma_address = value;
    } else if (key == "rdma_unavailable") {
      info.rdma_unavailable = value;
    } else if (key == "if") {
      info.interfaces.push_back(value);
    } else if (key == "cuda_ipc") {
      info.cuda_ipc_off = value == "off";
    } else if (key == "cores") {
      if (!ParseInt(value, 0, &info.cores)) {
        return ProtocolError("peer info cores '" + Escape(value) + "' is not a count");
      }
    } else if (key == "machine") {
      info.machine = value;
    } else if (key == "pid_ns") {
      info.pid_ns = value;
    } else if (key == "shm") {
      info.shm = value == "need" ? Shm::kNeed : value == "want" ? Shm::kWant : Shm::kNo;
    } else if (key == "tcp_lanes") {
      if (!ParseInt(value, 0, &info.tcp_lanes)) {
        return ProtocolError("peer info tcp_lanes '" + Escape(value) + "' is not a count");
      }
    }
    // Unknown keys are skipped: a newer peer may say more.
  }
  if (!has_rank || !has_pid || !has_host || !has_id) {
    return ProtocolError("peer info lacks one of rank, pid, hostname, host_id");
  }
  return info;
}

namespace {
// "net:[4026531840]": the namespace this process is in, or "" where /proc says nothing.
std::string NamespaceId(const char* kind) {
  char buf[128];
  const ssize_t n = readlink(("/proc/self/ns/" + std::string(kind)).c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}
}  // namespace

PeerInfo PeerInfo::Local(int rank) {
  PeerInfo info;
  info.rank = rank;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown-host");
  info.hostname = host;
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (in) std::getline(in, boot_id);
  // Two machines never share a boot id (cloned images may share a hostname);
  // containers on one machine share the boot id but usually not the hostname, nor
  // then /dev/shm: ranks with equal ids can be treated as one host.
  info.host_id = boot_id.empty() ? info.hostname : info.hostname + "/" + boot_id;
  // Network namespaces on one machine (containers, the project's two-node set-up) are
  // hosts of their own: they need not share /dev/shm, and must not be taken as one.
  const std::string net_ns = NamespaceId("net"), pid_ns = NamespaceId("pid");
  if (!net_ns.empty()) info.host_id += "/" + net_ns;
  info.pid_ns = boot_id + "/" + pid_ns;
  info.machine = boot_id;
  info.pid = static_cast<int>(getpid());
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);  // the host's, not this process's affinity
  info.cores = cores > 0 ? static_cast<int>(cores) : 0;
  for (const NetInterface& i : ListInterfaces()) info.interfaces.push_back(i.name + "=" + i.ip);
  return info;
}

}  // namespace chorus::rendezvous
