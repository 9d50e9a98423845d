#include "transport/tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

namespace chorus::transport::tcp {

Result<SockAddr> ParseHostPort(const std::string& text) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument("address '" + text + "' is not of the form [ipv6]:port");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("address '" + text + "' has no ':port'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return InvalidArgument("address '" + text + "' has a bad port '" + port + "'");
  }
  SockAddr out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(p));
    out.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(p));
    out.len = sizeof(sockaddr_in6);
  } else {
    return InvalidArgument("address '" + text + "': '" + host + "' is not a numeric IPv4/IPv6 address");
  }
  return out;
}

std::string FormatSockAddr(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
  inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
  return "[" + std::string(buf) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

std::string RemoteAddressOf(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown address";
  return FormatSockAddr(reinterpret_cast<sockaddr*>(&a));
}

namespace {

Status SetBuffers(int fd, int64_t bufsize) {
  if (bufsize <= 0) return Status::Ok();
  int v = static_cast<int>(std::min<int64_t>(bufsize, INT32_MAX / 2));
  // The FORCE variants ignore net.core.[rw]mem_max but need CAP_NET_ADMIN.
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0) {
    return IoError("setsockopt(SO_SNDBUF=" + std::to_string(v) + ")", errno);
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0) {
    return IoError("setsockopt(SO_RCVBUF=" + std::to_string(v) + ")", errno);
  }
  return Status::Ok();
}

// Waits for `events` on fd until the deadline.
Status PollFor(int fd, short events, Deadline deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.RemainingMs();
    int r = ::poll(&p, 1, ms);
    if (r > 0) return Status::Ok();
    if (r == 0) return TimeoutError(what + ": timed out");
    if (errno != EINTR) return IoError(what + ": poll", errno);
  }
}

}  // namespace

Status SetDataSocketOptions(int fd, int64_t bufsize) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return IoError("setsockopt(TCP_NODELAY)", errno);
  return SetBuffers(fd, bufsize);
}

Status SetLivenessOptions(int fd, int64_t peer_timeout_ms) {
  const auto user_timeout = static_cast<unsigned>(std::clamp<int64_t>(peer_timeout_ms, 1, INT32_MAX));
  // Probes start after a third of the timeout idle (whole seconds, at least one), so
  // TCP_USER_TIMEOUT, which then decides, sees unanswered probes by the time it expires.
  const int idle = static_cast<int>(std::clamp<int64_t>(peer_timeout_ms / 3000, 1, 3600));
  const int interval = std::max(1, idle / 2);
  const int count = 3;
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) != 0)
    return IoError("setsockopt(TCP_USER_TIMEOUT=" + std::to_string(user_timeout) + ")", errno);
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0)
    return IoError("setsockopt(SO_KEEPALIVE)", errno);
  if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) != 0) {
    return IoError("setsockopt(TCP_KEEPIDLE=" + std::to_string(idle) + ", TCP_KEEPINTVL=" + std::to_string(interval) +
                       ", TCP_KEEPCNT=" + std::to_string(count) + ")",
                   errno);
  }
  return Status::Ok();
}

Result<UniqueFd> ListenTcp(const std::string& ip, int backlog, int64_t bufsize, std::string* bound_address) {
  Result<SockAddr> addr =
      ParseHostPort(ip.find(':') != std::string::npos && ip[0] != '[' ? "[" + ip + "]:0" : ip + ":0");
  if (!addr.ok()) return addr.status();
  UniqueFd fd(::socket(addr->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return IoError("socket()", errno);
  Status st = SetDataSocketOptions(fd.get(), bufsize);
  if (!st.ok()) return st;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr->storage), addr->len) != 0) {
    return IoError("bind to " + ip + " (is it a local address?)", errno);
  }
  if (::listen(fd.get(), backlog) != 0) return IoError("listen on " + ip, errno);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) return IoError("getsockname", errno);
  *bound_address = FormatSockAddr(reinterpret_cast<sockaddr*>(&bound));
  return fd;
}

Result<UniqueFd> ConnectTcp(const std::string& address, int64_t bufsize, Deadline deadline) {
  Result<SockAddr> addr = ParseHostPort(address);
  if (!addr.ok()) return addr.status();
  int backoff_ms = 1;
  for (;;) {
    UniqueFd fd(::socket(addr->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return IoError("socket()", errno);
    Status st = SetDataSocketOptions(fd.get(), bufsize);
    if (!st.ok()) return st;
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr->storage), addr->len) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        st = PollFor(fd.get(), POLLOUT, deadline, "connect to " + address);
        if (!st.ok()) return st;
        socklen_t len = sizeof(err);
        if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) return fd;
    // A peer that published its address is listening, but a full backlog or a
    // racing start can still refuse: retry with backoff until the deadline.
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == EAGAIN || err == ECONNRESET;
    if (!retry || deadline.expired()) return IoError("connect to " + address, err);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoff_ms, std::max(1, deadline.RemainingMs()))));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

Result<UniqueFd> AcceptTcp(int listen_fd, Deadline deadline) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError("accept", errno);
    Status st = PollFor(listen_fd, POLLIN, deadline, "accept");
    if (!st.ok()) return st;
  }
}

Status SendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CHORUS_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline, what));
      continue;
    }
    return IoError(what + ": send", errno);
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return PeerFailed(what + ": connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      CHORUS_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline, what));
      continue;
    }
    return IoError(what + ": recv", errno);
  }
  return Status::Ok();
}

}  // namespace chorus::transport::tcp
