#include "tools/perf/tcp_kv_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <gloo/common/error.h>

namespace chorus {
namespace perf {
namespace {

// Sends or receives exactly n bytes; false on error, EOF or deadline.
bool IoAll(int fd, void* buf, size_t n, bool sending, std::chrono::steady_clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) return false;
    if (pr <= 0) continue;
    const ssize_t r = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r == 0) {
      errno = ECONNRESET;
      return false;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

const auto kForever = std::chrono::hours(24 * 365);

}  // namespace

KvServer::~KvServer() { Stop(); }

Status KvServer::Start(int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return IoError("kv store socket", errno);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    listen_fd_ = -1;
    return IoError("kv store bind to port " + std::to_string(port) + " (MASTER_PORT in use?)", err);
  }
  if (::listen(listen_fd_, 128) != 0) return IoError("kv store listen", errno);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void KvServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& t : clients_) t.join();
  for (int fd : client_fds_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void KvServer::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    client_fds_.push_back(fd);
    clients_.emplace_back([this, fd] { Serve(fd); });
  }
}

void KvServer::Serve(int fd) {
  const auto forever = std::chrono::steady_clock::now() + kForever;
  while (!stopping_) {
    char cmd = 0;
    uint32_t klen = 0;
    if (!IoAll(fd, &cmd, 1, false, forever) || !IoAll(fd, &klen, 4, false, forever)) return;
    std::string key(klen, '\0');
    if (!IoAll(fd, key.data(), klen, false, forever)) return;
    if (cmd == 'S') {
      uint32_t vlen = 0;
      if (!IoAll(fd, &vlen, 4, false, forever)) return;
      std::vector<char> value(vlen);
      if (!IoAll(fd, value.data(), vlen, false, forever)) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        data_[key] = std::move(value);
      }
      cv_.notify_all();
    } else if (cmd == 'G') {
      std::vector<char> value;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || data_.count(key) > 0; });
        if (stopping_) return;
        value = data_[key];
      }
      uint32_t vlen = static_cast<uint32_t>(value.size());
      if (!IoAll(fd, &vlen, 4, true, forever) || !IoAll(fd, value.data(), vlen, true, forever)) return;
    } else {
      return;  // not our protocol: drop the connection
    }
  }
}

TcpKvStore::~TcpKvStore() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<TcpKvStore>> TcpKvStore::Connect(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) return InvalidArgument("cannot resolve MASTER_ADDR '" + host + "': " + gai_strerror(gai));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int last_err = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_err = errno;
      break;
    }
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return std::unique_ptr<TcpKvStore>(new TcpKvStore(fd, where, timeout));
    }
    last_err = errno;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not listen yet
  }
  ::freeaddrinfo(res);
  return TimeoutError("could not reach the rendezvous store at " + where + " within " +
                      std::to_string(timeout.count()) + " ms (last error: " + std::strerror(last_err) +
                      "); is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
}

void TcpKvStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  char cmd = 'S';
  uint32_t klen = static_cast<uint32_t>(key.size());
  uint32_t vlen = static_cast<uint32_t>(data.size());
  if (!IoAll(fd_, &cmd, 1, true, deadline) || !IoAll(fd_, &klen, 4, true, deadline) ||
      !IoAll(fd_, const_cast<char*>(key.data()), klen, true, deadline) || !IoAll(fd_, &vlen, 4, true, deadline) ||
      !IoAll(fd_, const_cast<char*>(data.data()), vlen, true, deadline)) {
    throw ::gloo::IoException("rendezvous store " + where_ + ": set '" + key + "' failed: " + std::strerror(errno));
  }
}

std::vector<char> TcpKvStore::GetWithTimeout(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char cmd = 'G';
  uint32_t klen = static_cast<uint32_t>(key.size());
  uint32_t vlen = 0;
  std::vector<char> value;
  bool ok = IoAll(fd_, &cmd, 1, true, deadline) && IoAll(fd_, &klen, 4, true, deadline) &&
            IoAll(fd_, const_cast<char*>(key.data()), klen, true, deadline) && IoAll(fd_, &vlen, 4, false, deadline);
  if (ok) {
    value.resize(vlen);
    ok = IoAll(fd_, value.data(), vlen, false, deadline);
  }
  if (!ok) {
    // The stream is out of step after a partial exchange: no further request can work.
    const int err = errno;
    ::shutdown(fd_, SHUT_RDWR);
    throw ::gloo::IoException("rendezvous store " + where_ + ": waiting for key '" + key + "' failed after " +
                              std::to_string(timeout.count()) + " ms: " + std::strerror(err) +
                              " (did every rank start with the same WORLD_SIZE?)");
  }
  return value;
}

std::vector<char> TcpKvStore::get(const std::string& key) { return GetWithTimeout(key, timeout_); }

void TcpKvStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpKvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  for (const auto& k : keys) GetWithTimeout(k, timeout);
}

}  // namespace perf
}  // namespace chorus
