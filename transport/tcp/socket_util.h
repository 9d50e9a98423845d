// Small RAII and blocking-with-deadline helpers for TCP sockets, used while the mesh
// is being built (before the engine thread owns the sockets).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "chorus/deadline.h"
#include "chorus/status.h"

namespace chorus::transport::tcp {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
};

// Parses "1.2.3.4:5678" or "[::1]:5678".
Result<SockAddr> ParseHostPort(const std::string& text);
std::string FormatSockAddr(const sockaddr* sa);

// Non-blocking listening socket on ip, ephemeral port. bufsize (> 0) is applied before
// listen() so accepted sockets inherit it and the TCP window scale fits it.
Result<UniqueFd> ListenTcp(const std::string& ip, int backlog, int64_t bufsize, std::string* bound_address);
// Non-blocking connect to "ip:port", retrying refused connections until the deadline.
Result<UniqueFd> ConnectTcp(const std::string& address, int64_t bufsize, Deadline deadline);
// Waits for and accepts one connection (non-blocking result).
Result<UniqueFd> AcceptTcp(int listen_fd, Deadline deadline);
// TCP_NODELAY and, when bufsize > 0, SO_SNDBUF/SO_RCVBUF (forced past rmem_max when allowed).
Status SetDataSocketOptions(int fd, int64_t bufsize);

// Blocking (poll-based) transfer of exactly len bytes on a non-blocking socket.
// `what` names the peer in errors.
Status SendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what);
Status RecvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& what);

}  // namespace chorus::transport::tcp
