// The epoll engine: non-blocking sockets, level-triggered EPOLLIN always, EPOLLOUT only
// while a send could not complete, recv/sendmsg performed directly.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

#include "transport/tcp/poller.h"

namespace chorus::transport::tcp {
namespace {

class EpollPoller final : public Poller {
 public:
  EpollPoller(IoHandler* handler, UniqueFd ep, int wake_fd)
      : handler_(handler), ep_(std::move(ep)), wake_fd_(wake_fd) {}

  const char* name() const override { return "epoll"; }

  Status Add(Conn* c) override {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c;
    if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) return IoError("epoll_ctl(ADD)", errno);
    return Status::Ok();
  }

  void Remove(Conn* c) override { epoll_ctl(ep_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr); }

  void StartSend(Conn* c) override {
    // Try at once: the common case (room in the socket buffer) costs one sendmsg and
    // no epoll round trip. EPOLLOUT is registered only when the socket is full.
    if (!c->epoll_out) DoSend(c);
  }

  void Cancel(Conn*) override {}  // nothing is ever in flight

  bool any_thread() const override { return true; }

  Status Poll(int timeout_ms) override {
    epoll_event events[64];
    int n = epoll_wait(ep_.get(), events, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) return Status::Ok();
      return IoError("epoll_wait", errno);
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof(v)) < 0 && errno == EINTR) {
        }
        continue;
      }
      auto* c = static_cast<Conn*>(events[i].data.ptr);
      if (events[i].events & EPOLLOUT) DoSend(c);
      if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) DoRecv(c);
    }
    return Status::Ok();
  }

  Status Init() {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, wake_fd_, &ev) != 0) return IoError("epoll_ctl(ADD eventfd)", errno);
    return Status::Ok();
  }

 private:
  void DoRecv(Conn* c) {
    // A bounded number of reads per wake-up keeps one busy socket from starving others.
    for (int i = 0; i < 16 && !c->shut; ++i) {
      RecvMachine::Target t = c->rx.Next();
      ssize_t n = ::recv(c->fd.get(), t.ptr, t.len, 0);
      if (n > 0) {
        handler_->OnRecvResult(c, n);
        if (static_cast<size_t>(n) < t.len) return;  // drained; level-triggered epoll reports more
      } else if (n == 0) {
        handler_->OnRecvResult(c, 0);
        return;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else {
        handler_->OnRecvResult(c, -errno);
        return;
      }
    }
  }

  void DoSend(Conn* c) {
    for (;;) {
      if (c->shut) return;
      int niov = c->tx.Prepare(c->iov, SendMachine::kMaxIov);
      if (niov == 0) {
        SetOut(c, false);
        return;
      }
      msghdr msg{};
      msg.msg_iov = c->iov;
      msg.msg_iovlen = static_cast<size_t>(niov);
      size_t want = 0;
      for (int i = 0; i < niov; ++i) want += c->iov[i].iov_len;
      ssize_t n = ::sendmsg(c->fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        handler_->OnSendResult(c, n);
        if (static_cast<size_t>(n) < want) {  // socket buffer full
          SetOut(c, true);
          return;
        }
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        SetOut(c, true);
        return;
      } else {
        handler_->OnSendResult(c, -errno);
        return;
      }
    }
  }

  void SetOut(Conn* c, bool on) {
    if (c->epoll_out == on || c->shut) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? uint32_t{EPOLLOUT} : 0u);
    ev.data.ptr = c;
    if (epoll_ctl(ep_.get(), EPOLL_CTL_MOD, c->fd.get(), &ev) == 0) c->epoll_out = on;
  }

  IoHandler* handler_;
  UniqueFd ep_;
  int wake_fd_;
};

}  // namespace

Result<std::unique_ptr<Poller>> MakeEpollPoller(IoHandler* handler, int wake_fd) {
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return IoError("epoll_create1", errno);
  auto p = std::make_unique<EpollPoller>(handler, std::move(ep), wake_fd);
  CHORUS_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Poller>(std::move(p));
}

}  // namespace chorus::transport::tcp
