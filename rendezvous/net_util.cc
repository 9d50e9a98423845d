#include "rendezvous/net_util.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>

#include "rendezvous/socket_io.h"

namespace chorus::rendezvous {

std::vector<NetInterface> ListInterfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if (!(ifa->ifa_flags & IFF_UP)) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, buf, sizeof(buf));
    out.push_back({ifa->ifa_name, buf, (ifa->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

Result<InterfaceFilter> InterfaceFilter::Parse(const std::string& text) {
  InterfaceFilter f;
  std::string rest = text;
  if (!rest.empty() && rest[0] == '^') {
    f.exclude = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    f.exact = true;
    rest.erase(0, 1);
  }
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string name = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) f.names.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (f.names.empty()) {
    return InvalidArgument("interface filter '" + text + "' names no interface (e.g. eth0, =eth0, ^docker,lo)");
  }
  return f;
}

bool InterfaceFilter::Matches(const std::string& ifname) const {
  bool listed = false;
  for (const auto& n : names) {
    if (exact ? ifname == n : ifname.compare(0, n.size(), n) == 0) listed = true;
  }
  return listed != exclude;
}

Result<std::string> LocalAddressToward(const std::string& host) {
  if (host.empty()) return InvalidArgument("no host given to find the local address toward");
  Result<std::vector<SocketAddress>> addrs = Resolve(host, 9, SOCK_DGRAM, false);
  if (!addrs.ok()) return addrs.status();
  Status last;
  for (const SocketAddress& a : addrs.value()) {
    UniqueFd fd(socket(a.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      last = IoError("socket", errno);
      continue;
    }
    // A UDP connect only picks a route and a source address; nothing is sent.
    if (connect(fd.get(), a.get(), a.len) != 0) {
      last = IoError("no route from this host toward " + host, errno);
      continue;
    }
    SocketAddress local;
    local.len = sizeof(local.storage);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local.storage), &local.len) != 0) {
      last = IoError("getsockname", errno);
      continue;
    }
    return NumericHost(local);
  }
  return last;
}

std::string DefaultHostAddress() { return DefaultHostAddress(ListInterfaces()); }

std::string DefaultHostAddress(const std::vector<NetInterface>& interfaces) {
  for (const NetInterface& i : interfaces) {
    if (!i.loopback) return i.ip;
  }
  return "127.0.0.1";
}

Result<std::string> SelectFromInterfaces(const std::string& ifname_filter,
                                         const std::vector<NetInterface>& interfaces) {
  Result<InterfaceFilter> filter = InterfaceFilter::Parse(ifname_filter);
  if (!filter.ok()) return filter.status();
  // Loopback only when nothing else matches: other hosts cannot reach it.
  for (bool want_loopback : {false, true}) {
    for (const NetInterface& i : interfaces) {
      if (i.loopback == want_loopback && filter.value().Matches(i.name)) return i.ip;
    }
  }
  std::string present;
  for (const NetInterface& i : interfaces) present += (present.empty() ? "" : ", ") + i.name + "=" + i.ip;
  return InvalidArgument("no network interface that is up with an IPv4 address matches the filter '" + ifname_filter +
                         "' (interfaces up: " + (present.empty() ? std::string("none") : present) + ")");
}

Result<std::string> SelectInterfaceAddress(const std::string& ifname_filter, const std::string& master_addr) {
  if (!ifname_filter.empty()) return SelectFromInterfaces(ifname_filter, ListInterfaces());
  if (master_addr.empty()) return DefaultHostAddress();
  Result<std::string> addr = LocalAddressToward(master_addr);
  if (!addr.ok()) return addr.status().WithContext("choosing the interface toward MASTER_ADDR " + master_addr);
  return addr;
}

std::string StoreBindAddress(const std::string& master_addr, const std::vector<NetInterface>& interfaces) {
  in_addr v4{};
  if (inet_pton(AF_INET, master_addr.c_str(), &v4) != 1) return "";
  if ((ntohl(v4.s_addr) >> 24) == 127) return master_addr;
  for (const NetInterface& i : interfaces) {
    if (i.ip == master_addr) return master_addr;
  }
  return "";
}

std::string RandomHex() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string HostName() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

}  // namespace chorus::rendezvous
