// libFuzzer target: the TCP receive state machine (RecvMachine) fed a byte stream in
// fuzzer-chosen pieces, as the kernel would hand it over. Every DATA payload must land
// whole in the destination its header was given, ABORT reasons must match their
// length; a bad stream must be a Status. Built by tools/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/tcp/frame_machine.h"

namespace chorus::transport::tcp {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Payloads of up to 1 MiB go to a buffer; larger ones are discarded (as the engine
// does for an unmatched message), so a header cannot make the fuzzer allocate 2^48.
class Sink : public FrameSink {
 public:
  Status OnDataHeader(const FrameHeader& h, RecvDest* dest) override {
    Check(open_ == nullptr && h.type == FrameType::kData);
    if (h.len <= (1u << 20)) {
      buffers_.emplace_back(h.len, '\0');
      dest->ptr = buffers_.back().data();
      open_ = &buffers_.back();
      dest->cookie = open_;
    } else {
      dest->cookie = &discard_;
      open_ = &discard_;
    }
    return Status::Ok();
  }
  Status OnDataDone(const FrameHeader& h, void* cookie) override {
    Check(cookie == open_ && h.type == FrameType::kData);
    open_ = nullptr;
    return Status::Ok();
  }
  Status OnAbortFrame(const std::string& reason) override {
    Check(reason.size() <= kMaxReasonLen);
    return Status::Ok();
  }
  Status OnControlFrame(const FrameHeader& h) override {
    Check(IsControlFrame(h.type) && h.len == 0);
    return Status::Ok();
  }

 private:
  std::vector<std::string> buffers_;
  std::string discard_;
  void* open_ = nullptr;
};

}  // namespace
}  // namespace chorus::transport::tcp

// Byte 0: the staging size (small, so headers straddle receives); byte 1: the piece
// size seed; the rest is the stream.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::transport::tcp;
  if (size < 2) return 0;
  Sink sink;
  RecvMachine machine(&sink, kFrameHeaderSize + data[0]);
  size_t piece = 1 + data[1] % 97, pos = 2;
  while (pos < size) {
    RecvMachine::Target t = machine.Next();
    Check(t.len > 0);
    size_t n = std::min({t.len, size - pos, piece});
    std::memcpy(t.ptr, data + pos, n);
    pos += n;
    piece = 1 + (piece * 31 + n) % 4096;
    if (!machine.OnReceived(n).ok()) break;
  }
  return 0;
}
