#include "rendezvous/bootstrap_ring_wire.h"

#include <algorithm>
#include <cstring>

namespace chorus::rendezvous::ring_wire {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  const auto u = static_cast<uint64_t>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

template <typename T>
T Take(const char* in) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return static_cast<T>(v);
}

int TakeInt(const char* in) { return static_cast<int32_t>(Take<uint32_t>(in)); }

constexpr uint16_t kAccept = 0;
constexpr uint16_t kRefuse = 1;
constexpr uint16_t kFailed = 2;
constexpr size_t kReasonLenAt = 20;

}  // namespace

std::string Encode(const Hello& h) {
  std::string out;
  Put<uint32_t>(&out, kMagic);
  Put<uint16_t>(&out, kVersion);
  Put<uint16_t>(&out, h.secret ? 1 : 0);
  Put<uint64_t>(&out, h.comm_id);
  Put<uint32_t>(&out, static_cast<uint32_t>(h.sender));
  Put<uint32_t>(&out, static_cast<uint32_t>(h.receiver));
  Put<uint32_t>(&out, static_cast<uint32_t>(h.size));
  Put<uint32_t>(&out, 0);
  out.append(reinterpret_cast<const char*>(h.nonce.data()), h.nonce.size());
  return out;
}

std::optional<Hello> DecodeHello(std::string_view in) {
  if (in.size() != kHelloSize || Take<uint32_t>(in.data()) != kMagic || Take<uint16_t>(in.data() + 4) != kVersion) {
    return std::nullopt;
  }
  Hello h;
  h.secret = (Take<uint16_t>(in.data() + 6) & 1) != 0;
  h.comm_id = Take<uint64_t>(in.data() + 8);
  h.sender = TakeInt(in.data() + 16);
  h.receiver = TakeInt(in.data() + 20);
  h.size = TakeInt(in.data() + 24);
  std::memcpy(h.nonce.data(), in.data() + 32, h.nonce.size());
  return h;
}

std::string Encode(const Reply& r) {
  std::string out;
  Put<uint32_t>(&out, kMagic);
  Put<uint16_t>(&out, kVersion);
  Put<uint16_t>(&out, r.accept ? kAccept : r.failed ? kFailed : kRefuse);
  Put<uint32_t>(&out, static_cast<uint32_t>(r.acceptor));
  Put<uint32_t>(&out, static_cast<uint32_t>(r.size));
  Put<uint32_t>(&out, r.secret ? 1 : 0);
  const std::string_view reason = std::string_view(r.reason).substr(0, kMaxReasonBytes);
  Put<uint32_t>(&out, static_cast<uint32_t>(reason.size()));
  out.append(reinterpret_cast<const char*>(r.nonce.data()), r.nonce.size());
  out.append(reinterpret_cast<const char*>(r.mac.data()), r.mac.size());
  out.append(reason);
  return out;
}

Result<size_t> ReplyLength(std::string_view head) {
  if (head.size() < kReplySize) {
    return ProtocolError("a ring reply of " + std::to_string(head.size()) + " bytes (at least " +
                         std::to_string(kReplySize) + ")");
  }
  if (Take<uint32_t>(head.data()) != kMagic || Take<uint16_t>(head.data() + 4) != kVersion) {
    return ProtocolError("not a chorus bootstrap ring reply (magic or version differs)");
  }
  // Checked before anything waits for the reason: the cap bounds what a peer can make
  // the connector buffer.
  const uint32_t reason_len = Take<uint32_t>(head.data() + kReasonLenAt);
  if (reason_len > kMaxReasonBytes) {
    return ProtocolError("a ring reply with a reason of " + std::to_string(reason_len) + " bytes (at most " +
                         std::to_string(kMaxReasonBytes) + ")");
  }
  return kReplySize + reason_len;
}

Result<Reply> DecodeReply(std::string_view in) {
  Result<size_t> len = ReplyLength(in);
  if (!len.ok()) return len.status();
  if (in.size() != len.value()) {
    return ProtocolError("a ring reply of " + std::to_string(in.size()) + " bytes; its header says " +
                         std::to_string(len.value()));
  }
  const uint16_t verdict = Take<uint16_t>(in.data() + 6);
  if (verdict != kAccept && verdict != kRefuse && verdict != kFailed) {
    return ProtocolError("a ring reply with verdict " + std::to_string(verdict) + " (0 to 2 are known)");
  }
  Reply r;
  r.accept = verdict == kAccept;
  r.failed = verdict == kFailed;
  r.acceptor = TakeInt(in.data() + 8);
  r.size = TakeInt(in.data() + 12);
  r.secret = (Take<uint32_t>(in.data() + 16) & 1) != 0;
  std::memcpy(r.nonce.data(), in.data() + 24, r.nonce.size());
  std::memcpy(r.mac.data(), in.data() + 40, r.mac.size());
  r.reason = std::string(in.substr(kReplySize));
  return r;
}

std::string FailedReason(StatusCode code, std::string_view message) {
  return std::to_string(static_cast<int>(code)) + " " + std::string(message);
}

Failure ParseFailedReason(std::string_view reason) {
  Failure f;
  const size_t sp = reason.find(' ');
  if (sp == std::string_view::npos) {
    f.message = std::string(reason);
    return f;
  }
  // Leading digits, saturated: no overflow however long the number.
  uint32_t code = 0;
  for (size_t i = 0; i < sp && reason[i] >= '0' && reason[i] <= '9'; ++i) {
    code = std::min<uint32_t>(code * 10 + static_cast<uint32_t>(reason[i] - '0'), 1000);
  }
  f.code = CodeOf(code);
  f.message = std::string(reason.substr(sp + 1));
  return f;
}

StatusCode CodeOf(uint32_t code) {
  if (code == 0 || code > static_cast<uint32_t>(StatusCode::kInternal)) return StatusCode::kPeerFailed;
  return static_cast<StatusCode>(code);
}

std::string Frame(uint32_t kind, uint32_t seq, int origin, std::string_view payload) {
  std::string out;
  out.reserve(kFrameHeaderSize + payload.size());
  Put<uint32_t>(&out, kind);
  Put<uint32_t>(&out, seq);
  Put<uint32_t>(&out, static_cast<uint32_t>(origin));
  Put<uint32_t>(&out, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

Result<std::optional<FrameHead>> PeekFrame(std::string_view buf, size_t off) {
  if (off > buf.size() || buf.size() - off < kFrameHeaderSize) return std::optional<FrameHead>();
  FrameHead h;
  h.kind = Take<uint32_t>(buf.data() + off);
  h.seq = Take<uint32_t>(buf.data() + off + 4);
  h.origin = TakeInt(buf.data() + off + 8);
  h.len = Take<uint32_t>(buf.data() + off + 12);
  const size_t cap = h.kind == kFailureFrame ? kMaxReasonBytes : kMaxRecordBytes;
  if ((h.kind != kDataFrame && h.kind != kFailureFrame) || h.len > cap) {
    return ProtocolError("a ring frame of kind " + std::to_string(h.kind) + " and " + std::to_string(h.len) +
                         " bytes (at most " + std::to_string(cap) + ")");
  }
  if (buf.size() - off < kFrameHeaderSize + h.len) return std::optional<FrameHead>();
  return std::optional<FrameHead>(h);
}

}  // namespace chorus::rendezvous::ring_wire
