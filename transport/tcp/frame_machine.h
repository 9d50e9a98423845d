// The per-socket protocol state machine, shared by the io_uring and epoll engines.
// It never performs I/O: it says where the next bytes should be received to / which
// bytes should be sent next, and the engine reports how many bytes the kernel moved.
// That keeps both engines' behaviour identical and makes the protocol testable by
// feeding bytes by hand.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/request.h"
#include "transport/tcp/wire.h"

namespace chorus::transport::tcp {

// Where the payload of a DATA frame goes. ptr == nullptr: read and discard it.
struct RecvDest {
  char* ptr = nullptr;
  void* cookie = nullptr;  // handed back in OnDataDone
};

// The receiving side's consumer of frames (the engine's matching layer).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual Status OnDataHeader(const FrameHeader& h, RecvDest* dest) = 0;
  virtual Status OnDataDone(const FrameHeader& h, void* cookie) = 0;
  virtual Status OnAbortFrame(const std::string& reason) = 0;
  virtual Status OnControlFrame(const FrameHeader& h) = 0;  // READY, RTS
};

class RecvMachine {
 public:
  // Headers and small payloads are received into staging so that one syscall can
  // bring many frames; payload remainders of at least kDirectMin go straight to
  // their destination (zero copy). After a frame of at least kDirectMin the next
  // receive asks for a header only: large frames come in runs, and their payloads
  // then land in place whole instead of up to kStagingBytes of each being copied.
  static constexpr size_t kStagingBytes = 256 << 10;
  static constexpr size_t kDirectMin = 32 << 10;

  explicit RecvMachine(FrameSink* sink, size_t staging_bytes = kStagingBytes);

  struct Target {
    char* ptr;
    size_t len;
    bool direct;  // into a payload destination (the engine may ask for all of it: MSG_WAITALL)
  };
  // Where the next receive should land. Valid until OnReceived.
  Target Next();
  // The kernel put n (> 0, <= Next().len) bytes at Next().ptr. Parses frames and calls
  // the sink; an error means the stream is unusable.
  Status OnReceived(size_t n);
  // True between a frame's first header byte and its last payload byte.
  bool mid_frame() const { return state_ == State::kPayload || rpos_ != wpos_; }

 private:
  enum class State { kHeader, kPayload };
  Status Process();
  Status FinishPayload();

  FrameSink* sink_;
  std::unique_ptr<char[]> staging_;
  size_t cap_;
  size_t rpos_ = 0, wpos_ = 0;  // unparsed bytes are staging_[rpos_, wpos_)
  State state_ = State::kHeader;
  FrameHeader cur_;
  RecvDest dest_;
  uint64_t remaining_ = 0;  // payload bytes of cur_ still to come
  bool last_direct_ = false;
  uint64_t last_len_ = 0;  // payload length of the last frame header parsed
  std::string abort_reason_;
};

// One frame waiting to be sent: header, then payload (user memory, or owned text for ABORT).
struct OutFrame {
  uint8_t header[kFrameHeaderSize];
  FrameHeader h;  // what header encodes
  const char* payload = nullptr;
  uint64_t len = 0;
  uint64_t sent = 0;        // bytes of header + payload already handed to the kernel
  BasicRequestPtr request;  // null for ABORT frames
  std::string owned;
};

class SendMachine {
 public:
  static constexpr int kMaxIov = 64;

  void Push(const FrameHeader& h, const char* payload, BasicRequestPtr request);
  void PushOwned(const FrameHeader& h, std::string payload);
  bool empty() const { return q_.empty(); }
  // True when no frame is partly sent (a new frame may be inserted at the front).
  bool at_boundary() const { return q_.empty() || q_.front().sent == 0; }
  // Fills iov with the next bytes to send, coalescing queued frames; returns the count.
  int Prepare(struct iovec* iov, int max_iov) const;
  // n bytes of what Prepare described were sent. Fully sent frames are appended to `done`.
  void OnSent(size_t n, std::vector<BasicRequestPtr>* done);
  // Removes every frame that has not started (all if include_started); returns their
  // requests. Only while no send described by Prepare is in flight.
  std::vector<BasicRequestPtr> Drop(bool include_started);
  // Removes the frames that have not started and satisfy `take`, keeping the order of
  // the rest; returns them. Only while no send described by Prepare is in flight.
  std::vector<OutFrame> TakeUnstarted(const std::function<bool(const OutFrame&)>& take);

 private:
  std::deque<OutFrame> q_;
};

}  // namespace chorus::transport::tcp
