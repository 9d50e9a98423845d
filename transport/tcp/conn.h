// One TCP socket to a peer: the fd, its protocol state machines, and the flags the
// I/O engines keep about operations in flight on it. Owned by the Engine.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/tcp/frame_machine.h"
#include "transport/tcp/socket_util.h"

namespace chorus::transport::tcp {

class Engine;

struct Conn final : public FrameSink {
  Conn(Engine* e, int peer_rank, int socket_index, UniqueFd socket)
      : engine(e), peer(peer_rank), index(socket_index), fd(std::move(socket)), rx(this) {}

  Status OnDataHeader(const FrameHeader& h, RecvDest* dest) override;
  Status OnDataDone(const FrameHeader& h, void* cookie) override;
  Status OnAbortFrame(const std::string& reason) override;
  Status OnControlFrame(const FrameHeader& h) override;

  Engine* const engine;
  const int peer;
  const int index;
  UniqueFd fd;
  RecvMachine rx;
  SendMachine tx;

  bool shut = false;           // shut down: start no new operation on it
  bool recv_inflight = false;  // io_uring: a recv is submitted
  bool send_inflight = false;  // io_uring: a sendmsg is submitted (iov/msg below are in use)
  bool epoll_out = false;      // epoll: EPOLLOUT is registered
  bool abort_pending = false;  // an ABORT frame must be queued once no send is in flight
  bool pause_pending = false;  // the peer said PAUSE: pull back queued data once no send is in flight
  // The connection broke (a failed send, EOF, a reset): why, and until when the peer's
  // connections are still read, because it may have said why (an ABORT frame, possibly
  // on another of its sockets) before it went. recv_ended: nothing more to read here.
  Status lost;
  Clock::time_point lost_deadline{};
  bool recv_ended = false;
  struct msghdr msg {};
  struct iovec iov[SendMachine::kMaxIov];
};

}  // namespace chorus::transport::tcp
