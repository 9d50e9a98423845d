// libFuzzer target: the bootstrap ring's decoders (rendezvous/bootstrap_ring_wire.h) on
// arbitrary bytes: the hello, the reply (a failed one's reason too) and a buffer of
// frames walked with PeekFrame as BootstrapRing::TakeFrames walks its input. What
// decodes must encode to bytes that decode the same (a frame to the very same bytes);
// anything else must be nullopt or a Status. Built by tools/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/bootstrap_ring_wire.h"

namespace chorus::rendezvous::ring_wire {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameHello(const Hello& a, const Hello& b) {
  return a.comm_id == b.comm_id && a.sender == b.sender && a.receiver == b.receiver && a.size == b.size &&
         a.secret == b.secret && a.nonce == b.nonce;
}

bool SameReply(const Reply& a, const Reply& b) {
  return a.accept == b.accept && a.failed == b.failed && a.acceptor == b.acceptor && a.size == b.size &&
         a.secret == b.secret && a.nonce == b.nonce && a.mac == b.mac && a.reason == b.reason;
}

void FuzzHello(std::string_view in) {
  const std::optional<Hello> h = DecodeHello(in);
  if (!h) return;
  Check(in.size() == kHelloSize);
  const std::string out = Encode(*h);
  Check(out.size() == kHelloSize);
  const std::optional<Hello> again = DecodeHello(out);
  Check(again && SameHello(*h, *again));
}

void CheckReply(std::string_view in, const Reply& r) {
  Check(r.reason.size() <= kMaxReasonBytes && in.size() == kReplySize + r.reason.size());
  Check(!(r.accept && r.failed));
  const std::string out = Encode(r);
  Check(out.size() == in.size());
  Result<Reply> again = DecodeReply(out);
  Check(again.ok() && SameReply(r, again.value()));
  if (r.failed) {
    const Failure f = ParseFailedReason(r.reason);
    Check(f.code != StatusCode::kOk && f.code <= StatusCode::kInternal);
    const Failure g = ParseFailedReason(FailedReason(f.code, f.message));
    Check(g.code == f.code && g.message == f.message);
  }
}

// As the connector reads it: the length from the fixed part, then the whole reply.
void FuzzReply(std::string_view in) {
  Result<size_t> len = ReplyLength(in);
  if (len.ok()) {
    Check(len.value() >= kReplySize && len.value() <= kReplySize + kMaxReasonBytes);
    if (in.size() >= len.value()) {
      Result<Reply> r = DecodeReply(in.substr(0, len.value()));
      if (r.ok()) CheckReply(in.substr(0, len.value()), r.value());
    }
  }
  Result<Reply> whole = DecodeReply(in);
  if (whole.ok()) CheckReply(in, whole.value());
}

void FuzzFrames(std::string_view buf) {
  size_t off = 0;
  for (;;) {
    Result<std::optional<FrameHead>> head = PeekFrame(buf, off);
    if (!head.ok() || !head.value()) break;
    const FrameHead& h = *head.value();
    Check(h.kind == kDataFrame || h.kind == kFailureFrame);
    Check(h.len <= (h.kind == kFailureFrame ? kMaxReasonBytes : kMaxRecordBytes));
    const size_t end = off + kFrameHeaderSize + h.len;
    Check(end <= buf.size());
    // One byte short, the frame is not there yet.
    Result<std::optional<FrameHead>> partial = PeekFrame(buf.substr(0, end - 1), off);
    Check(partial.ok() && !partial.value());
    const std::string_view payload = buf.substr(off + kFrameHeaderSize, h.len);
    Check(Frame(h.kind, h.seq, h.origin, payload) == buf.substr(off, end - off));
    if (h.kind == kFailureFrame) {
      const StatusCode code = CodeOf(h.seq);
      Check(code != StatusCode::kOk && code <= StatusCode::kInternal);
    }
    off = end;
  }
}

}  // namespace
}  // namespace chorus::rendezvous::ring_wire

// The first byte picks the decoder; the rest is its input.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::rendezvous::ring_wire;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: FuzzHello(in); break;
    case 1: FuzzReply(in); break;
    default: FuzzFrames(in); break;
  }
  return 0;
}
