// Small RAII and blocking-with-deadline helpers for TCP sockets, used while the mesh
// is being built (before the engine thread owns the sockets).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace chorus::transport::tcp {

using ::chorus::UniqueFd;  // common/unique_fd.h

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
};

// Parses "1.2.3.4:5678" or "[::1]:5678".
Result<SockAddr> ParseHostPort(const std::string& text);
std::string FormatSockAddr(const sockaddr* sa);
// The remote end of a connected socket, "1.2.3.4:5" (for messages).
std::string RemoteAddressOf(int fd);

// Non-blocking listening socket on ip, ephemeral port. bufsize (> 0) is applied before
// listen() so accepted sockets inherit it and the TCP window scale fits it.
Result<UniqueFd> ListenTcp(const std::string& ip, int backlog, int64_t bufsize, std::string* bound_address);
// Non-blocking connect to "ip:port", retrying refused connections until the deadline.
Result<UniqueFd> ConnectTcp(const std::string& address, int64_t bufsize, Deadline deadline);
// Waits for and accepts one connection (non-blocking result).
Result<UniqueFd> AcceptTcp(int listen_fd, Deadline deadline);
// TCP_NODELAY and, when bufsize > 0, SO_SNDBUF/SO_RCVBUF (forced past rmem_max when allowed).
Status SetDataSocketOptions(int fd, int64_t bufsize);
// A connection whose sent bytes, or keepalive probes, stay unacknowledged for about
// peer_timeout_ms fails with ETIMEDOUT (TCP_USER_TIMEOUT, SO_KEEPALIVE): a cut link or a
// vanished host is noticed in seconds, not after the kernel's retransmissions (minutes).
// The peer's kernel answers both, so a busy or stopped peer process is not failed by them.
Status SetLivenessOptions(int fd, int64_t peer_timeout_ms);

// Blocking (poll-based) transfer of exactly len bytes on a non-blocking socket.
// `what` names the peer in errors.
Status SendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what);
Status RecvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& what);

}  // namespace chorus::transport::tcp
