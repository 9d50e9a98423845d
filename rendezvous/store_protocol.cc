#include "rendezvous/store_protocol.h"

#include <array>
#include <cstring>

namespace chorus::rendezvous {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutI64(std::string* out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void PutStr(std::string* out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}
uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Bounds-checked cursor over a payload: every read fails instead of overrunning.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool U8(uint8_t* v) {
    if (data_.size() < 1) return false;
    *v = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (data_.size() < 4) return false;
    *v = LoadU32(data_.data());
    data_.remove_prefix(4);
    return true;
  }
  bool I64(int64_t* v) {
    if (data_.size() < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(data_[i])) << (8 * i);
    *v = static_cast<int64_t>(u);
    data_.remove_prefix(8);
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || data_.size() < n) return false;
    s->assign(data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  // A count of strings that follow: each needs at least 4 bytes, which bounds
  // the count by the payload (no huge reserve from a garbage count).
  bool StrList(std::vector<std::string>* v) {
    uint32_t n = 0;
    if (!U32(&n) || n > data_.size() / 4) return false;
    v->resize(n);
    for (auto& s : *v) {
      if (!Str(&s)) return false;
    }
    return true;
  }
  bool done() const { return data_.empty(); }
  size_t left() const { return data_.size(); }

 private:
  std::string_view data_;
};

}  // namespace

bool IsKnownStoreOp(uint8_t opcode) {
  return opcode >= static_cast<uint8_t>(StoreOp::kSet) && opcode <= static_cast<uint8_t>(StoreOp::kMultiGet);
}

const char* StoreOpName(StoreOp op) {
  switch (op) {
    case StoreOp::kSet: return "SET";
    case StoreOp::kGet: return "GET";
    case StoreOp::kWait: return "WAIT";
    case StoreOp::kAdd: return "ADD";
    case StoreOp::kCompareSet: return "COMPARE_SET";
    case StoreOp::kDelete: return "DELETE";
    case StoreOp::kCheck: return "CHECK";
    case StoreOp::kPing: return "PING";
    case StoreOp::kMultiGet: return "MULTI_GET";
  }
  return "UNKNOWN";
}

FrameParse ParseFrame(std::string_view buffer, uint32_t max_length) {
  FrameParse r;
  if (buffer.size() < 4) return r;
  uint32_t length = LoadU32(buffer.data());
  if (length < 2) {
    r.state = FrameState::kInvalid;
    r.error =
        ProtocolError("frame length " + std::to_string(length) + " is shorter than its 2-byte version/opcode header");
    return r;
  }
  if (length > max_length) {
    r.state = FrameState::kInvalid;
    r.error =
        ProtocolError("frame length " + std::to_string(length) + " exceeds the limit of " + std::to_string(max_length) +
                      " bytes" + (max_length == kMaxStoreFrameBytes ? " (64 MiB)" : " before authentication"));
    return r;
  }
  if (buffer.size() < 5) return r;
  uint8_t version = static_cast<uint8_t>(buffer[4]);
  if (buffer.size() >= 6) r.opcode = static_cast<uint8_t>(buffer[5]);
  if (version != kStoreProtocolVersion) {
    r.state = FrameState::kInvalid;
    r.error = ProtocolError("frame has protocol version " + std::to_string(version) + ", this store speaks " +
                            std::to_string(kStoreProtocolVersion));
    return r;
  }
  size_t total = 4 + static_cast<size_t>(length);
  if (buffer.size() < total) return r;
  r.state = FrameState::kComplete;
  r.frame.opcode = static_cast<uint8_t>(buffer[5]);
  r.frame.payload = buffer.substr(kStoreFrameHeaderBytes, total - kStoreFrameHeaderBytes);
  r.frame.total_bytes = total;
  return r;
}

std::string EncodeFrame(uint8_t opcode, std::string_view payload) {
  std::string out;
  out.reserve(kStoreFrameHeaderBytes + payload.size());
  PutU32(&out, static_cast<uint32_t>(payload.size() + 2));
  out.push_back(static_cast<char>(kStoreProtocolVersion));
  out.push_back(static_cast<char>(opcode));
  out.append(payload.data(), payload.size());
  return out;
}

std::string EncodeRequest(const StoreRequest& req) {
  std::string p;
  auto key = [&req]() -> std::string_view { return req.keys.empty() ? std::string_view() : req.keys[0]; };
  auto list = [&p, &req]() {
    PutU32(&p, static_cast<uint32_t>(req.keys.size()));
    for (const auto& k : req.keys) PutStr(&p, k);
  };
  switch (req.op) {
    case StoreOp::kSet:
      PutStr(&p, key());
      PutStr(&p, req.value);
      break;
    case StoreOp::kGet:
      PutStr(&p, key());
      PutI64(&p, req.number);
      break;
    case StoreOp::kWait:
    case StoreOp::kMultiGet:
      list();
      PutI64(&p, req.number);
      break;
    case StoreOp::kAdd:
      PutStr(&p, key());
      PutI64(&p, req.number);
      break;
    case StoreOp::kCompareSet:
      PutStr(&p, key());
      PutStr(&p, req.expected);
      PutStr(&p, req.value);
      break;
    case StoreOp::kDelete: PutStr(&p, key()); break;
    case StoreOp::kCheck: list(); break;
    case StoreOp::kPing: break;
  }
  return EncodeFrame(static_cast<uint8_t>(req.op), p);
}

Result<StoreRequest> DecodeRequest(uint8_t opcode, std::string_view payload) {
  if (!IsKnownStoreOp(opcode)) return ProtocolError("unknown opcode " + std::to_string(opcode));
  StoreRequest req;
  req.op = static_cast<StoreOp>(opcode);
  Reader r(payload);
  bool ok = true;
  auto one_key = [&]() {
    req.keys.resize(1);
    return r.Str(&req.keys[0]);
  };
  switch (req.op) {
    case StoreOp::kSet: ok = one_key() && r.Str(&req.value); break;
    case StoreOp::kGet: ok = one_key() && r.I64(&req.number); break;
    case StoreOp::kWait:
    case StoreOp::kMultiGet: ok = r.StrList(&req.keys) && r.I64(&req.number); break;
    case StoreOp::kAdd: ok = one_key() && r.I64(&req.number); break;
    case StoreOp::kCompareSet: ok = one_key() && r.Str(&req.expected) && r.Str(&req.value); break;
    case StoreOp::kDelete: ok = one_key(); break;
    case StoreOp::kCheck: ok = r.StrList(&req.keys); break;
    case StoreOp::kPing: break;
  }
  if (!ok) {
    return ProtocolError(std::string("malformed ") + StoreOpName(req.op) + " payload (" +
                         std::to_string(payload.size()) + " bytes)");
  }
  if (!r.done()) {
    return ProtocolError(std::string(StoreOpName(req.op)) + " payload has " + std::to_string(r.left()) +
                         " trailing bytes");
  }
  return req;
}

std::string EncodeReply(StoreOp op, const StoreReply& reply) {
  std::string p;
  p.push_back(static_cast<char>(reply.code));
  if (reply.code != ReplyCode::kOk) {
    PutStr(&p, reply.message);
    return EncodeFrame(static_cast<uint8_t>(op), p);
  }
  auto first = [&reply]() -> std::string_view { return reply.values.empty() ? std::string_view() : reply.values[0]; };
  switch (op) {
    case StoreOp::kGet:
    case StoreOp::kCompareSet: PutStr(&p, first()); break;
    case StoreOp::kMultiGet:
      PutU32(&p, static_cast<uint32_t>(reply.values.size()));
      for (const auto& v : reply.values) PutStr(&p, v);
      break;
    case StoreOp::kAdd: PutI64(&p, reply.number); break;
    case StoreOp::kDelete:
    case StoreOp::kCheck: p.push_back(reply.number != 0 ? 1 : 0); break;
    case StoreOp::kSet:
    case StoreOp::kWait:
    case StoreOp::kPing: break;
  }
  return EncodeFrame(static_cast<uint8_t>(op), p);
}

std::string EncodeErrorReply(uint8_t opcode, const std::string& message) {
  std::string p;
  p.push_back(static_cast<char>(ReplyCode::kError));
  PutStr(&p, message);
  return EncodeFrame(opcode, p);
}

Result<StoreReply> DecodeReply(StoreOp op, uint8_t opcode, std::string_view payload) {
  Reader r(payload);
  uint8_t code = 0;
  if (!r.U8(&code) || code > static_cast<uint8_t>(ReplyCode::kError)) {
    return ProtocolError("reply to " + std::string(StoreOpName(op)) + " has no valid status byte");
  }
  StoreReply reply;
  reply.code = static_cast<ReplyCode>(code);
  if (reply.code != ReplyCode::kOk) {
    if (!r.Str(&reply.message) || !r.done()) {
      return ProtocolError("malformed error reply to " + std::string(StoreOpName(op)));
    }
    return reply;
  }
  if (opcode != static_cast<uint8_t>(op)) {
    return ProtocolError("reply opcode " + std::to_string(opcode) + " does not match the request " + StoreOpName(op));
  }
  bool ok = true;
  uint8_t flag = 0;
  switch (op) {
    case StoreOp::kGet:
    case StoreOp::kCompareSet:
      reply.values.resize(1);
      ok = r.Str(&reply.values[0]);
      break;
    case StoreOp::kMultiGet: ok = r.StrList(&reply.values); break;
    case StoreOp::kAdd: ok = r.I64(&reply.number); break;
    case StoreOp::kDelete:
    case StoreOp::kCheck:
      ok = r.U8(&flag) && flag <= 1;
      reply.number = flag;
      break;
    case StoreOp::kSet:
    case StoreOp::kWait:
    case StoreOp::kPing: break;
  }
  if (!ok || !r.done()) {
    return ProtocolError("malformed reply to " + std::string(StoreOpName(op)) + " (" + std::to_string(payload.size()) +
                         " bytes)");
  }
  return reply;
}

namespace {

void PutBytes(std::string* out, const uint8_t* p, size_t n) { out->append(reinterpret_cast<const char*>(p), n); }
template <size_t N>
void TakeBytes(std::string_view* in, std::array<uint8_t, N>* out) {
  std::memcpy(out->data(), in->data(), N);
  in->remove_prefix(N);
}

}  // namespace

std::string EncodeAuthChallenge(const AuthChallenge& c) {
  std::string p(1, static_cast<char>(c.secret ? 1 : 0));
  PutBytes(&p, c.server_nonce.data(), c.server_nonce.size());
  return EncodeFrame(kAuthChallengeOpcode, p);
}

Result<AuthChallenge> DecodeAuthChallenge(uint8_t opcode, std::string_view payload) {
  if (opcode != kAuthChallengeOpcode || payload.size() != kAuthChallengeFrameBytes - kStoreFrameHeaderBytes ||
      static_cast<uint8_t>(payload[0]) > 1) {
    return ProtocolError("expected the store's AUTH_CHALLENGE, got opcode " + std::to_string(opcode) + " with " +
                         std::to_string(payload.size()) + " payload bytes");
  }
  AuthChallenge c;
  c.secret = payload[0] == 1;
  payload.remove_prefix(1);
  TakeBytes(&payload, &c.server_nonce);
  return c;
}

std::string EncodeAuthProof(const AuthProof& a) {
  std::string p(1, static_cast<char>(a.has_secret ? 1 : 0));
  PutBytes(&p, a.client_nonce.data(), a.client_nonce.size());
  PutBytes(&p, a.mac.data(), a.mac.size());
  return EncodeFrame(kAuthProofOpcode, p);
}

Result<AuthProof> DecodeAuthProof(uint8_t opcode, std::string_view payload) {
  if (opcode != kAuthProofOpcode || payload.size() != kAuthProofFrameBytes - kStoreFrameHeaderBytes ||
      static_cast<uint8_t>(payload[0]) > 1) {
    return ProtocolError("the first frame is not an AUTH_PROOF (opcode " + std::to_string(opcode) + ", " +
                         std::to_string(payload.size()) + " payload bytes): not a chorus store client of this version");
  }
  AuthProof a;
  a.has_secret = payload[0] == 1;
  payload.remove_prefix(1);
  TakeBytes(&payload, &a.client_nonce);
  TakeBytes(&payload, &a.mac);
  return a;
}

std::string EncodeAuthAccepted(const Sha256Digest& server_mac) {
  std::string p(1, static_cast<char>(ReplyCode::kOk));
  PutBytes(&p, server_mac.data(), server_mac.size());
  return EncodeFrame(kAuthProofOpcode, p);
}

Result<Sha256Digest> DecodeAuthAnswer(uint8_t opcode, std::string_view payload) {
  Reader r(payload);
  uint8_t code = 0;
  std::string message;
  if (r.U8(&code) && code == static_cast<uint8_t>(ReplyCode::kError) && r.Str(&message) && r.done()) {
    return MismatchError(message);
  }
  if (opcode != kAuthProofOpcode || code != static_cast<uint8_t>(ReplyCode::kOk) ||
      payload.size() != kAuthAnswerFrameBytes - kStoreFrameHeaderBytes) {
    return ProtocolError("malformed answer to AUTH_PROOF (opcode " + std::to_string(opcode) + ", " +
                         std::to_string(payload.size()) + " bytes)");
  }
  payload.remove_prefix(1);
  Sha256Digest mac;
  TakeBytes(&payload, &mac);
  return mac;
}

Sha256Digest StoreClientMac(const JobSecret& secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return secret.Mac("chorus-store-client", {View(server_nonce), View(client_nonce)});
}

Sha256Digest StoreServerMac(const JobSecret& secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return secret.Mac("chorus-store-server", {View(server_nonce), View(client_nonce)});
}

}  // namespace chorus::rendezvous
