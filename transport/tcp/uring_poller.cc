// The io_uring engine: one ring for all sockets, at most one recv and one sendmsg in
// flight per socket, an IORING_OP_READ on the wake eventfd, submissions batched into
// the io_uring_enter that also waits (no busy polling).
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/tcp/poller.h"

namespace chorus::transport::tcp {
namespace {

// user_data: a Conn* with the operation in its low bits (Conn is 8-byte aligned), or
// one of the small constants below.
constexpr uint64_t kIgnore = 0;  // cancellations
constexpr uint64_t kWake = 4;
constexpr uint64_t kRecvBit = 1;
constexpr uint64_t kSendBit = 2;

int InitRing(unsigned entries, io_uring* ring) {
  // The engine thread is the only submitter, so the kernel may defer completion work
  // to our io_uring_enter calls (fewer interrupts of the application thread).
  const unsigned attempts[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_COOP_TASKRUN, 0};
  int r = -EINVAL;
  for (unsigned flags : attempts) {
    io_uring_params p{};
    p.flags = flags;
    r = io_uring_queue_init_params(entries, ring, &p);
    if (r != -EINVAL) return r;
  }
  return r;
}

class UringPoller final : public Poller {
 public:
  UringPoller(IoHandler* handler, int wake_fd) : handler_(handler), wake_fd_(wake_fd) {}

  ~UringPoller() override {
    if (!ready_) return;
    // The wake read targets wake_buf_: cancel it and wait for it before the memory goes.
    if (wake_armed_) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_cancel64(sqe, kWake, 0);
      io_uring_sqe_set_data64(sqe, kIgnore);
      // Best effort while tearing down: the ring goes away next, whatever Reap says.
      for (int i = 0; i < 100 && wake_armed_; ++i) (void)Reap(10, /*dispatch=*/false);
    }
    io_uring_queue_exit(&ring_);
  }

  Status Init(int max_conns) {
    unsigned entries = 64;
    while (entries < static_cast<unsigned>(2 * max_conns + 16) && entries < 4096) entries *= 2;
    int r = InitRing(entries, &ring_);
    if (r < 0) return IoError("io_uring_queue_init(" + std::to_string(entries) + " entries)", -r);
    ready_ = true;
    return Status::Ok();
  }

  const char* name() const override { return "io_uring"; }
  bool any_thread() const override { return false; }

  Status Add(Conn* c) override {
    ArmRecv(c);
    return Status::Ok();
  }

  void Remove(Conn*) override {}

  void StartSend(Conn* c) override {
    if (c->shut || c->send_inflight) return;
    int niov = c->tx.Prepare(c->iov, SendMachine::kMaxIov);
    if (niov == 0) return;
    c->msg = msghdr{};
    c->msg.msg_iov = c->iov;
    c->msg.msg_iovlen = static_cast<size_t>(niov);
    io_uring_sqe* sqe = GetSqe();
    // MSG_WAITALL: the kernel retries short sends itself, one completion per batch.
    io_uring_prep_sendmsg(sqe, c->fd.get(), &c->msg, MSG_NOSIGNAL | MSG_WAITALL);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(c) | kSendBit);
    c->send_inflight = true;
  }

  void Cancel(Conn* c) override {
    if (!c->recv_inflight && !c->send_inflight) return;
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_cancel_fd(sqe, c->fd.get(), IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, kIgnore);
  }

  Status Poll(int timeout_ms) override {
    if (!wake_armed_) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
      io_uring_sqe_set_data64(sqe, kWake);
      wake_armed_ = true;
    }
    return Reap(timeout_ms, /*dispatch=*/true);
  }

 private:
  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // SQ full: hand it to the kernel and retry
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void ArmRecv(Conn* c) {
    if (c->shut || c->recv_inflight) return;
    RecvMachine::Target t = c->rx.Next();
    io_uring_sqe* sqe = GetSqe();
    // A payload received in place may ask for all of it at once (one completion).
    io_uring_prep_recv(sqe, c->fd.get(), t.ptr, t.len, t.direct ? MSG_WAITALL : 0);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(c) | kRecvBit);
    c->recv_inflight = true;
  }

  Status Reap(int timeout_ms, bool dispatch) {
    io_uring_cqe* cqe = nullptr;
    int r;
    if (timeout_ms < 0) {
      r = io_uring_submit_and_wait(&ring_, 1);
    } else {
      __kernel_timespec ts{};
      ts.tv_sec = timeout_ms / 1000;
      ts.tv_nsec = static_cast<long long>(timeout_ms % 1000) * 1000000;
      r = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    }
    if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
      return IoError("io_uring_submit_and_wait", -r);
    }
    // Copy completions out before dispatching: handlers queue new submissions.
    for (;;) {
      io_uring_cqe* batch[64];
      unsigned n = io_uring_peek_batch_cqe(&ring_, batch, 64);
      if (n == 0) break;
      struct Done {
        uint64_t data;
        int32_t res;
      } done[64];
      for (unsigned i = 0; i < n; ++i) done[i] = {batch[i]->user_data, batch[i]->res};
      io_uring_cq_advance(&ring_, n);
      for (unsigned i = 0; i < n; ++i) Dispatch(done[i].data, done[i].res, dispatch);
    }
    return Status::Ok();
  }

  void Dispatch(uint64_t data, int32_t res, bool dispatch) {
    if (data == kIgnore) return;
    if (data == kWake) {
      wake_armed_ = false;
      return;
    }
    auto* c = reinterpret_cast<Conn*>(data & ~uint64_t{7});
    if (data & kRecvBit) {
      c->recv_inflight = false;
      if (!dispatch) return;
      handler_->OnRecvResult(c, res);
      ArmRecv(c);
    } else {
      c->send_inflight = false;
      if (!dispatch) return;
      handler_->OnSendResult(c, res);
      StartSend(c);
    }
  }

  IoHandler* handler_;
  int wake_fd_;
  io_uring ring_{};
  bool ready_ = false;
  bool wake_armed_ = false;
  uint64_t wake_buf_ = 0;
};

}  // namespace

Result<std::unique_ptr<Poller>> MakeUringPoller(IoHandler* handler, int wake_fd, int max_conns) {
  auto p = std::make_unique<UringPoller>(handler, wake_fd);
  CHORUS_RETURN_IF_ERROR(p->Init(max_conns));
  return std::unique_ptr<Poller>(std::move(p));
}

Status ProbeUring() {
  io_uring ring;
  int r = io_uring_queue_init(4, &ring, 0);
  if (r < 0) return IoError("io_uring_setup", -r);
  io_uring_queue_exit(&ring);
  return Status::Ok();
}

}  // namespace chorus::transport::tcp
