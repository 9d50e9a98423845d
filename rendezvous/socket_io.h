// Small socket helpers shared by the store server, the store client and the
// rendezvous: an owning fd, name resolution, deadline-bounded connect/send/receive.
// Internal to rendezvous/ (the transport has its own, tuned for bulk data).
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace chorus::rendezvous {

using ::chorus::UniqueFd;  // common/unique_fd.h

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// "host:port", with brackets around IPv6 literals.
std::string JoinHostPort(const std::string& host, uint16_t port);
// The numeric address of `addr` ("10.0.0.1", "::1"), without the port.
std::string NumericHost(const SocketAddress& addr);
// Resolves `host` (name or literal; "" with passive = any address) for a TCP or UDP
// port. IPv4 results come first: rendezvous addresses are mostly IPv4.
Result<std::vector<SocketAddress>> Resolve(const std::string& host, uint16_t port, int socktype, bool passive);

Status SetNonBlocking(int fd);
void SetNoDelay(int fd);

// Connects once to one of `addrs`, bounded by `deadline`. Returns a non-blocking
// socket; the error keeps the errno of the last failure (refused, unreachable...).
Result<UniqueFd> ConnectOnce(const std::vector<SocketAddress>& addrs, Deadline deadline);

// Writes all of `data` to a non-blocking socket, waiting up to `deadline`.
Status SendAll(int fd, std::string_view data, Deadline deadline, const std::string& peer);
// Reads from a non-blocking socket into `buf` (appending) until at least one byte
// arrived; error on EOF (naming `peer`), on a socket error or at the deadline.
Status RecvSome(int fd, std::string* buf, Deadline deadline, const std::string& peer);

// "250 ms", "1.5 s", "30 s": durations for error messages.
std::string FormatDuration(int64_t ms);

}  // namespace chorus::rendezvous
