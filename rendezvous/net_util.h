// Which local address to advertise to the other ranks: the interface that reaches
// the master, or one picked by an NCCL_SOCKET_IFNAME-style filter.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::rendezvous {

struct NetInterface {
  std::string name;  // "eth0"
  std::string ip;    // "10.0.0.2"
  bool loopback = false;
};

// The IPv4 addresses of the interfaces that are up (getifaddrs), in kernel order.
std::vector<NetInterface> ListInterfaces();

// An interface filter, like NCCL_SOCKET_IFNAME:
//   "eth0,ib"    names starting with eth0 or ib
//   "=eth0,ib0"  exactly these names
//   "^docker,lo" anything except names starting with docker or lo ("^=" exact)
struct InterfaceFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
  bool Matches(const std::string& ifname) const;
  static Result<InterfaceFilter> Parse(const std::string& text);
};

// The local address (IPv4, or IPv6 when `host` has only that) of the interface the
// kernel would route through toward `host` (UDP connect + getsockname: no packet sent).
Result<std::string> LocalAddressToward(const std::string& host);

// The address to listen on. Empty filter: LocalAddressToward(master_addr), or when
// master_addr is empty (file://) the first non-loopback IPv4, else 127.0.0.1.
// Otherwise the first matching interface, non-loopback ones first; the error names
// the filter and the interfaces present.
Result<std::string> SelectInterfaceAddress(const std::string& ifname_filter, const std::string& master_addr);
// The same choice among given interfaces (testable without the machine's).
Result<std::string> SelectFromInterfaces(const std::string& ifname_filter, const std::vector<NetInterface>& interfaces);

// The first non-loopback IPv4 that is up, else 127.0.0.1.
std::string DefaultHostAddress();
// The same choice among given interfaces.
std::string DefaultHostAddress(const std::vector<NetInterface>& interfaces);

// Where the store of MASTER_ADDR listens: that address where it is a numeric IPv4 of
// this host (127.0.0.1 keeps the store off the network), else "" (every interface): a
// name may resolve to 127.0.1.1 here but to the real address on other hosts, and an
// address that is not local may be a NAT's.
std::string StoreBindAddress(const std::string& master_addr, const std::vector<NetInterface>& interfaces);

// This machine's hostname ("?" when it cannot be read).
std::string HostName();
// 16 random hex digits: nonces and tokens that tell runs and processes apart.
std::string RandomHex();

}  // namespace chorus::rendezvous
