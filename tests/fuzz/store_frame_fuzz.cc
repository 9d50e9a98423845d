// libFuzzer target: the store protocol's frame parser and every decoder on arbitrary
// bytes. Whatever decodes must re-encode to a frame that decodes to the same thing;
// anything else must be a Status. Built by tools/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rendezvous/store_protocol.h"

namespace chorus::rendezvous {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// The frame in `bytes` (which the view points into: keep it alive).
FrameView Reparse(const std::string& bytes) {
  FrameParse p = ParseFrame(bytes);
  Check(p.state == FrameState::kComplete && p.frame.total_bytes == bytes.size());
  return p.frame;
}

bool SameRequest(const StoreRequest& a, const StoreRequest& b) {
  return a.op == b.op && a.keys == b.keys && a.value == b.value && a.expected == b.expected && a.number == b.number;
}

bool SameReply(const StoreReply& a, const StoreReply& b) {
  return a.code == b.code && a.message == b.message && a.values == b.values && a.number == b.number;
}

void FuzzPayload(uint8_t opcode, std::string_view payload) {
  if (Result<StoreRequest> r = DecodeRequest(opcode, payload); r.ok()) {
    std::string bytes = EncodeRequest(r.value());
    FrameView f = Reparse(bytes);
    Result<StoreRequest> again = DecodeRequest(f.opcode, f.payload);
    Check(again.ok() && SameRequest(r.value(), again.value()));
  }
  for (uint8_t op = 1; op <= static_cast<uint8_t>(StoreOp::kMultiGet); ++op) {
    Result<StoreReply> r = DecodeReply(static_cast<StoreOp>(op), opcode, payload);
    if (!r.ok()) continue;
    std::string bytes = EncodeReply(static_cast<StoreOp>(op), r.value());
    FrameView f = Reparse(bytes);
    Result<StoreReply> again = DecodeReply(static_cast<StoreOp>(op), f.opcode, f.payload);
    Check(again.ok() && SameReply(r.value(), again.value()));
  }
  if (Result<AuthChallenge> c = DecodeAuthChallenge(opcode, payload); c.ok()) {
    std::string bytes = EncodeAuthChallenge(c.value());
    FrameView f = Reparse(bytes);
    Result<AuthChallenge> again = DecodeAuthChallenge(f.opcode, f.payload);
    Check(again.ok() && again.value().secret == c.value().secret &&
          again.value().server_nonce == c.value().server_nonce);
  }
  if (Result<AuthProof> p = DecodeAuthProof(opcode, payload); p.ok()) {
    std::string bytes = EncodeAuthProof(p.value());
    FrameView f = Reparse(bytes);
    Result<AuthProof> again = DecodeAuthProof(f.opcode, f.payload);
    Check(again.ok() && again.value().has_secret == p.value().has_secret &&
          again.value().client_nonce == p.value().client_nonce && again.value().mac == p.value().mac);
  }
  if (Result<Sha256Digest> m = DecodeAuthAnswer(opcode, payload); m.ok()) {
    std::string bytes = EncodeAuthAccepted(m.value());
    FrameView f = Reparse(bytes);
    Result<Sha256Digest> again = DecodeAuthAnswer(f.opcode, f.payload);
    Check(again.ok() && again.value() == m.value());
  }
}

}  // namespace
}  // namespace chorus::rendezvous

// The input is a stream of frames, parsed as the server and the client do.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::rendezvous;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty()) {
    FrameParse p = ParseFrame(rest);
    if (p.state != FrameState::kComplete) {
      Check(p.state == FrameState::kIncomplete || !p.error.ok());
      break;
    }
    Check(p.frame.total_bytes >= kStoreFrameHeaderBytes && p.frame.total_bytes <= rest.size());
    Check(p.frame.payload.data() >= rest.data() &&
          p.frame.payload.data() + p.frame.payload.size() <= rest.data() + p.frame.total_bytes);
    FuzzPayload(p.frame.opcode, p.frame.payload);
    rest.remove_prefix(p.frame.total_bytes);
  }
  return 0;
}
