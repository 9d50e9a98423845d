#include "rendezvous/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::rendezvous {

std::string JoinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string NumericHost(const SocketAddress& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_addr, buf, sizeof(buf));
  } else if (addr.family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr.storage)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

Result<std::vector<SocketAddress>> Resolve(const std::string& host, uint16_t port, int socktype, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return Status(StatusCode::kIoError, "cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  std::vector<SocketAddress> v4, v6;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    (ai->ai_family == AF_INET ? v4 : v6).push_back(a);
  }
  freeaddrinfo(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  if (v4.empty()) return Status(StatusCode::kIoError, "host '" + host + "' has no usable address");
  return v4;
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return IoError("fcntl(O_NONBLOCK)", errno);
  return Status::Ok();
}

void SetNoDelay(int fd) {
  int one = 1;
  // Best effort: requests are small and latency-bound.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Result<UniqueFd> ConnectOnce(const std::vector<SocketAddress>& addrs, Deadline deadline) {
  Status last = IoError("connect", EHOSTUNREACH);
  for (const SocketAddress& a : addrs) {
    UniqueFd fd(socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      last = IoError("socket", errno);
      continue;
    }
    int rc = connect(fd.get(), a.get(), a.len);
    if (rc != 0 && errno != EINPROGRESS) {
      last = IoError("connect", errno);
      continue;
    }
    if (rc != 0) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n;
      do {
        n = poll(&p, 1, deadline.RemainingMs());
      } while (n < 0 && errno == EINTR);
      if (n == 0) {
        last = IoError("connect", ETIMEDOUT);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      if (n < 0 || getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = IoError("connect", err);
        continue;
      }
    }
    SetNoDelay(fd.get());
    return fd;
  }
  return last;
}

static Status WaitFor(int fd, short events, Deadline deadline, const std::string& peer, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, deadline.RemainingMs());
    if (n > 0) return Status::Ok();
    if (n == 0) return TimeoutError(std::string("no progress ") + what + " " + peer + " before the deadline");
    if (errno != EINTR) return IoError(std::string("poll while ") + what + " " + peer, errno);
  }
}

Status SendAll(int fd, std::string_view data, Deadline deadline, const std::string& peer) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CHORUS_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, peer, "sending to"));
      continue;
    }
    return PeerFailed("sending to " + peer + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status RecvSome(int fd, std::string* buf, Deadline deadline, const std::string& peer) {
  char chunk[64 * 1024];
  for (;;) {
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buf->append(chunk, static_cast<size_t>(n));
      return Status::Ok();
    }
    if (n == 0) return PeerFailed(peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      CHORUS_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, peer, "receiving from"));
      continue;
    }
    return PeerFailed("receiving from " + peer + ": " + std::strerror(errno));
  }
}

std::string FormatDuration(int64_t ms) {
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace chorus::rendezvous
