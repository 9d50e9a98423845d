// libFuzzer target: the TCP transport's handshake and frame header decoders on
// arbitrary bytes. What decodes must re-encode to bytes that decode the same (a frame
// header to the very same bytes); anything else must be a Status. Built by
// tools/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/tcp/wire.h"

namespace chorus::transport::tcp {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameHello(const Hello& a, const Hello& b) {
  return a.comm_id == b.comm_id && a.sender == b.sender && a.receiver == b.receiver && a.world_size == b.world_size &&
         a.socket_index == b.socket_index && a.nsockets == b.nsockets && a.has_secret == b.has_secret &&
         a.lazy == b.lazy && a.nonce == b.nonce;
}

bool SameReply(const Reply& a, const Reply& b) {
  return a.accept == b.accept && a.crossed == b.crossed && a.comm_id == b.comm_id && a.acceptor == b.acceptor &&
         a.connector == b.connector && a.world_size == b.world_size && a.nsockets == b.nsockets &&
         a.has_secret == b.has_secret && a.aborted == b.aborted && a.nonce == b.nonce && a.mac == b.mac;
}

}  // namespace
}  // namespace chorus::transport::tcp

// The first byte picks the decoder; the rest (zero-padded to its size) is its input.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::transport::tcp;
  if (size == 0) return 0;
  uint8_t in[kReplySize] = {};  // the largest of the three
  std::memcpy(in, data + 1, std::min(size - 1, sizeof in));
  switch (data[0] % 3) {
    case 0: {
      chorus::Result<Hello> h = DecodeHello(in);
      if (!h.ok()) break;
      uint8_t out[kHelloSize];
      EncodeHello(h.value(), out);
      chorus::Result<Hello> again = DecodeHello(out);
      Check(again.ok() && SameHello(h.value(), again.value()));
      break;
    }
    case 1: {
      uint32_t reason_len = 0;
      chorus::Result<Reply> r = DecodeReply(in, &reason_len);
      if (!r.ok()) break;
      Check(reason_len <= kMaxReasonLen);
      uint8_t out[kReplySize];
      EncodeReply(r.value(), out);
      uint32_t len_again = 0;
      chorus::Result<Reply> again = DecodeReply(out, &len_again);
      Check(again.ok() && SameReply(r.value(), again.value()));
      break;
    }
    default: {
      chorus::Result<FrameHeader> h = DecodeFrameHeader(in);
      if (!h.ok()) break;
      const FrameHeader& f = h.value();
      Check(f.total_len <= kMaxMessageBytes && f.offset <= f.total_len && f.len <= f.total_len - f.offset);
      Check(f.type != FrameType::kAbort || f.len <= kMaxReasonLen);
      uint8_t out[kFrameHeaderSize];
      EncodeFrameHeader(f, out);
      Check(std::memcmp(in, out, kFrameHeaderSize) == 0);
      break;
    }
  }
  return 0;
}
