// The two I/O engines behind one interface. An engine performs what each Conn's state
// machines ask for and reports the kernel's results to the IoHandler; it owns no
// protocol logic, so io_uring and epoll behave identically.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "transport/tcp/conn.h"

namespace chorus::transport::tcp {

class IoHandler {
 public:
  virtual ~IoHandler() = default;
  // res > 0: bytes received at conn->rx.Next(); 0: EOF; < 0: -errno.
  virtual void OnRecvResult(Conn* c, int64_t res) = 0;
  // res >= 0: bytes of conn->tx.Prepare() sent; < 0: -errno.
  virtual void OnSendResult(Conn* c, int64_t res) = 0;
};

class Poller {
 public:
  virtual ~Poller() = default;
  virtual const char* name() const = 0;
  // Whether any thread may call the methods below (one at a time), not only the one
  // that created the poller. io_uring may not: a submitted operation belongs to the
  // thread that submitted it and is cancelled when that thread exits.
  virtual bool any_thread() const = 0;
  // Starts receiving on the socket.
  virtual Status Add(Conn* c) = 0;
  // Forgets the socket; nothing may be in flight on it.
  virtual void Remove(Conn* c) = 0;
  // The socket has frames queued: send them (now, or as soon as it is writable).
  virtual void StartSend(Conn* c) = 0;
  // The socket was shut down: make in-flight operations finish promptly.
  virtual void Cancel(Conn* c) = 0;
  // Waits up to timeout_ms (-1: no limit) for I/O or a wake-up, performs I/O and
  // reports results. Submits whatever was queued first.
  virtual Status Poll(int timeout_ms) = 0;
};

// wake_fd: an eventfd other threads write to interrupt Poll. Not owned.
Result<std::unique_ptr<Poller>> MakeEpollPoller(IoHandler* handler, int wake_fd);
Result<std::unique_ptr<Poller>> MakeUringPoller(IoHandler* handler, int wake_fd, int max_conns);
// Whether this process may create an io_uring (io_uring_setup can fail with EPERM in
// containers, ENOSYS on old kernels); the error says why not.
Status ProbeUring();

}  // namespace chorus::transport::tcp
