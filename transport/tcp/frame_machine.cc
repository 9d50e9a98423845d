#include "transport/tcp/frame_machine.h"

#include <algorithm>
#include <cstring>

namespace chorus::transport::tcp {

RecvMachine::RecvMachine(FrameSink* sink, size_t staging_bytes)
    : sink_(sink), staging_(new char[staging_bytes]), cap_(staging_bytes) {}

RecvMachine::Target RecvMachine::Next() {
  // Only a partial header can be left unparsed (payload bytes are consumed eagerly),
  // so moving it to the front is cheap and leaves the whole buffer for the next recv.
  if (rpos_ == wpos_) {
    rpos_ = wpos_ = 0;
  } else if (rpos_ > 0) {
    std::memmove(staging_.get(), staging_.get() + rpos_, wpos_ - rpos_);
    wpos_ -= rpos_;
    rpos_ = 0;
  }
  if (state_ == State::kPayload && dest_.ptr != nullptr && rpos_ == wpos_ && remaining_ >= kDirectMin) {
    last_direct_ = true;
    return {dest_.ptr, static_cast<size_t>(remaining_), true};
  }
  last_direct_ = false;
  if (state_ == State::kHeader && last_len_ >= kDirectMin) {
    // Fewer than a header's bytes are buffered (Process() parses a whole one).
    return {staging_.get() + wpos_, kFrameHeaderSize - wpos_, false};
  }
  return {staging_.get() + wpos_, cap_ - wpos_, false};
}

Status RecvMachine::OnReceived(size_t n) {
  if (last_direct_) {
    dest_.ptr += n;
    remaining_ -= n;
    if (remaining_ == 0) return FinishPayload();
    return Status::Ok();
  }
  wpos_ += n;
  return Process();
}

Status RecvMachine::Process() {
  for (;;) {
    if (state_ == State::kHeader) {
      if (wpos_ - rpos_ < kFrameHeaderSize) break;
      Result<FrameHeader> h = DecodeFrameHeader(reinterpret_cast<const uint8_t*>(staging_.get() + rpos_));
      if (!h.ok()) return h.status();
      rpos_ += kFrameHeaderSize;
      cur_ = h.value();
      last_len_ = cur_.len;
      dest_ = RecvDest{};
      if (IsControlFrame(cur_.type)) {  // no payload
        CHORUS_RETURN_IF_ERROR(sink_->OnControlFrame(cur_));
        continue;
      }
      if (cur_.type == FrameType::kAbort) {
        abort_reason_.assign(cur_.len, '\0');
        dest_.ptr = abort_reason_.data();
      } else {
        CHORUS_RETURN_IF_ERROR(sink_->OnDataHeader(cur_, &dest_));
      }
      remaining_ = cur_.len;
      state_ = State::kPayload;
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(wpos_ - rpos_, remaining_));
    if (take > 0 && dest_.ptr != nullptr) {
      std::memcpy(dest_.ptr, staging_.get() + rpos_, take);
      dest_.ptr += take;
    }
    rpos_ += take;
    remaining_ -= take;
    if (remaining_ > 0) break;
    CHORUS_RETURN_IF_ERROR(FinishPayload());
  }
  if (rpos_ == wpos_) rpos_ = wpos_ = 0;
  return Status::Ok();
}

Status RecvMachine::FinishPayload() {
  state_ = State::kHeader;
  if (cur_.type == FrameType::kAbort) return sink_->OnAbortFrame(abort_reason_);
  return sink_->OnDataDone(cur_, dest_.cookie);
}

void SendMachine::Push(const FrameHeader& h, const char* payload, BasicRequestPtr request) {
  OutFrame& f = q_.emplace_back();
  EncodeFrameHeader(h, f.header);
  f.h = h;
  f.payload = payload;
  f.len = h.len;
  f.request = std::move(request);
}

void SendMachine::PushOwned(const FrameHeader& h, std::string payload) {
  OutFrame& f = q_.emplace_back();
  EncodeFrameHeader(h, f.header);
  f.h = h;
  f.owned = std::move(payload);
  f.payload = f.owned.data();  // deque elements never move, so this stays valid
  f.len = h.len;
}

int SendMachine::Prepare(struct iovec* iov, int max_iov) const {
  int n = 0;
  for (const OutFrame& f : q_) {
    if (n + 2 > max_iov) break;
    if (f.sent < kFrameHeaderSize) {
      iov[n++] = {const_cast<uint8_t*>(f.header) + f.sent, kFrameHeaderSize - f.sent};
      if (f.len > 0) iov[n++] = {const_cast<char*>(f.payload), f.len};
    } else {
      uint64_t off = f.sent - kFrameHeaderSize;
      iov[n++] = {const_cast<char*>(f.payload) + off, f.len - off};
    }
  }
  return n;
}

void SendMachine::OnSent(size_t n, std::vector<BasicRequestPtr>* done) {
  while (n > 0 && !q_.empty()) {
    OutFrame& f = q_.front();
    uint64_t step = std::min<uint64_t>(kFrameHeaderSize + f.len - f.sent, n);
    f.sent += step;
    n -= step;
    if (f.sent < kFrameHeaderSize + f.len) break;
    if (f.request) done->push_back(std::move(f.request));
    q_.pop_front();
  }
}

std::vector<BasicRequestPtr> SendMachine::Drop(bool include_started) {
  // Only the front frame can be partly sent; frames are removed from the back so the
  // kept one never moves (an engine may still reference its header).
  std::vector<BasicRequestPtr> dropped;
  size_t keep = (!include_started && !q_.empty() && q_.front().sent > 0) ? 1 : 0;
  while (q_.size() > keep) {
    if (q_.back().request) dropped.push_back(std::move(q_.back().request));
    q_.pop_back();
  }
  return dropped;
}

std::vector<OutFrame> SendMachine::TakeUnstarted(const std::function<bool(const OutFrame&)>& take) {
  std::vector<OutFrame> taken;
  std::deque<OutFrame> kept;
  for (OutFrame& f : q_) {
    if (f.sent == 0 && take(f)) {
      taken.push_back(std::move(f));
    } else {
      kept.push_back(std::move(f));
      if (!kept.back().owned.empty()) kept.back().payload = kept.back().owned.data();  // moved with its string
    }
  }
  q_ = std::move(kept);
  return taken;
}

}  // namespace chorus::transport::tcp
