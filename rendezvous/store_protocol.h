// The key-value store's wire protocol. Every message, request or reply, is a frame:
//
//   u32 length (little endian, of the bytes after it) | u8 version (=2) | u8 opcode | payload
//
// Authentication comes first, whether or not the job has a secret (version 2; the
// secret itself never travels, docs/design/job_secret.md):
//   server -> AUTH_CHALLENGE  u8 mode (0: no secret, 1: HMAC-SHA256) | 16-byte nonce Ns
//   client -> AUTH_PROOF      u8 has_secret | 16-byte nonce Nc |
//                             32-byte HMAC(secret, "chorus-store-client", Ns, Nc)
//                             (zeros unless both sides have a secret)
//   server -> AUTH_PROOF      u8 OK | 32-byte HMAC(secret, "chorus-store-server", Ns, Nc)
//                             (zeros without a secret), or an ERROR reply, and it closes.
// Until then the server reads nothing but that one fixed-size frame (a longer length
// field is refused before its bytes are read), for at most 10 s. A secret on one side only is refused,
// both sides saying which side lacks it.
// Strings in payloads are u32 length + bytes; integers are little-endian int64.
// Request payloads by opcode:
//   SET         key, value
//   GET         key, i64 timeout_ms           (waits until the key exists)
//   WAIT        u32 n, n keys, i64 timeout_ms (waits until all keys exist)
//   ADD         key, i64 delta                (atomic counter; replies the new value)
//   COMPARE_SET key, expected, desired        (replies the value held afterwards)
//   DELETE      key                           (replies whether it existed)
//   CHECK       u32 n, n keys                 (non-blocking: are all present?)
//   PING        (empty)
//   MULTI_GET   u32 n, n keys, i64 timeout_ms (WAIT that also returns the values:
//               one round trip for a bootstrap all-gather)
// A reply echoes the request's opcode; its payload is a u8 code (OK, TIMEOUT, ERROR)
// then, for TIMEOUT/ERROR, a message string, else the op's result:
//   GET, COMPARE_SET: value | MULTI_GET: u32 n, n values | ADD: i64 |
//   DELETE, CHECK: u8 0/1 | SET, WAIT, PING: empty.
// A frame longer than 64 MiB, with another version, an unknown opcode or a payload
// that does not parse exactly is a protocol error: the server answers ERROR (when
// the framing lets it) and closes the connection.
//
// Everything here is pure encode/decode, testable without sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::rendezvous {

inline constexpr uint8_t kStoreProtocolVersion = 2;  // 2: authentication first
// Upper bound on a frame's length field (the bytes after it).
inline constexpr uint32_t kMaxStoreFrameBytes = 64u << 20;
// u32 length + u8 version + u8 opcode.
inline constexpr size_t kStoreFrameHeaderBytes = 6;

enum class StoreOp : uint8_t {
  kSet = 1,
  kGet = 2,
  kWait = 3,
  kAdd = 4,
  kCompareSet = 5,
  kDelete = 6,
  kCheck = 7,
  kPing = 8,
  kMultiGet = 9,
};
bool IsKnownStoreOp(uint8_t opcode);
const char* StoreOpName(StoreOp op);

// The authentication frames' opcodes (not requests: IsKnownStoreOp is false for them).
inline constexpr uint8_t kAuthChallengeOpcode = 10;
inline constexpr uint8_t kAuthProofOpcode = 11;
// Whole frames, header included.
inline constexpr size_t kAuthChallengeFrameBytes = kStoreFrameHeaderBytes + 1 + 16;
inline constexpr size_t kAuthProofFrameBytes = kStoreFrameHeaderBytes + 1 + 16 + 32;
inline constexpr size_t kAuthAnswerFrameBytes = kStoreFrameHeaderBytes + 1 + 32;
// What a client reads of the server's frames before it is authenticated (room for an
// ERROR reply's message).
inline constexpr uint32_t kMaxAuthReplyLength = 4096;

struct AuthChallenge {
  bool secret = false;  // the server requires a job secret
  Nonce server_nonce{};
};
struct AuthProof {
  bool has_secret = false;
  Nonce client_nonce{};
  Sha256Digest mac{};
};

std::string EncodeAuthChallenge(const AuthChallenge& c);  // a whole frame
Result<AuthChallenge> DecodeAuthChallenge(uint8_t opcode, std::string_view payload);
std::string EncodeAuthProof(const AuthProof& p);  // a whole frame
Result<AuthProof> DecodeAuthProof(uint8_t opcode, std::string_view payload);
// The server's answer to a proof: OK with its own MAC (an ERROR reply otherwise: EncodeErrorReply).
std::string EncodeAuthAccepted(const Sha256Digest& server_mac);
// The server's MAC from an OK answer; an ERROR answer is kMismatch carrying its message.
Result<Sha256Digest> DecodeAuthAnswer(uint8_t opcode, std::string_view payload);
// The two MACs of the exchange; different labels, so one side's cannot stand for the other's.
Sha256Digest StoreClientMac(const JobSecret& secret, const Nonce& server_nonce, const Nonce& client_nonce);
Sha256Digest StoreServerMac(const JobSecret& secret, const Nonce& server_nonce, const Nonce& client_nonce);

enum class ReplyCode : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

struct StoreRequest {
  StoreOp op = StoreOp::kPing;
  std::vector<std::string> keys;  // exactly one for SET, GET, ADD, COMPARE_SET, DELETE
  std::string value;              // SET: the value; COMPARE_SET: desired
  std::string expected;           // COMPARE_SET
  int64_t number = 0;             // ADD: delta; GET, WAIT, MULTI_GET: timeout in ms
};

struct StoreReply {
  ReplyCode code = ReplyCode::kOk;
  std::string message;              // TIMEOUT, ERROR
  std::vector<std::string> values;  // GET, COMPARE_SET: one; MULTI_GET: one per key
  int64_t number = 0;               // ADD: new value; DELETE, CHECK: 0 or 1
};

// One frame found at the start of a buffer.
struct FrameView {
  uint8_t opcode = 0;
  std::string_view payload;
  size_t total_bytes = 0;  // header + payload: how much to consume
};
enum class FrameState { kIncomplete, kComplete, kInvalid };
struct FrameParse {
  FrameState state = FrameState::kIncomplete;
  FrameView frame;  // kComplete
  Status error;     // kInvalid: what is wrong with the header
  // kInvalid: the opcode byte when the header got that far, else 0 (for the error reply).
  uint8_t opcode = 0;
};

// Looks for one frame at the start of `buffer`. kIncomplete: more bytes are needed
// (and could make it valid); kInvalid: no continuation can (length out of range,
// other version). `max_length` bounds the length field (before authentication: the
// one frame expected).
FrameParse ParseFrame(std::string_view buffer, uint32_t max_length = kMaxStoreFrameBytes);
std::string EncodeFrame(uint8_t opcode, std::string_view payload);

std::string EncodeRequest(const StoreRequest& request);  // a whole frame
Result<StoreRequest> DecodeRequest(uint8_t opcode, std::string_view payload);

std::string EncodeReply(StoreOp op, const StoreReply& reply);  // a whole frame
// An ERROR reply for a request that could not be decoded (opcode echoed as is).
std::string EncodeErrorReply(uint8_t opcode, const std::string& message);
// Decodes the reply to a request of `op`. ERROR and TIMEOUT replies decode whatever
// their opcode (the server may not have known which op it was answering).
Result<StoreReply> DecodeReply(StoreOp op, uint8_t opcode, std::string_view payload);

}  // namespace chorus::rendezvous
