// The bytes the bootstrap ring (bootstrap_ring.h) puts on the wire, apart from its
// sockets so that the decoders can be fuzzed (tests/fuzz/bootstrap_ring_fuzz.cc).
//
// Little-endian, fixed sizes (docs/design/bootstrap_ring.md):
//   Hello (connector -> acceptor), kHelloSize bytes:
//     u32 magic  u16 version  u16 flags (bit 0: has a job secret)  u64 comm_id
//     i32 sender  i32 receiver  i32 world size  i32 zero  16 bytes nonce Nc
//   Reply (acceptor -> connector), kReplySize bytes then reason_len (<= kMaxReasonBytes)
//   bytes:
//     u32 magic  u16 version  u16 verdict (0 accept, 1 refuse, 2 failed)  i32 acceptor
//     i32 world size  u32 flags  u32 reason_len  16 bytes nonce Na
//     32 bytes HMAC(secret, kAcceptorLabel, Hello, Na)
//     A failed reply's reason is "<status code> <message>".
//   Proof (connector -> acceptor, with a secret only), kProofSize bytes:
//     HMAC(secret, kConnectorLabel, Hello, Na)
//   Frame: u32 kind (data, failure)  u32 all-gather number (a failure: its status code)
//     i32 origin rank  u32 len (data <= kMaxRecordBytes, failure <= kMaxReasonBytes),
//     then len bytes of payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::rendezvous::ring_wire {

constexpr uint32_t kMagic = 0x43485247;  // "CHRG"
constexpr uint16_t kVersion = 1;
constexpr size_t kHelloSize = 48;
constexpr size_t kReplySize = 72;
constexpr size_t kProofSize = 32;
constexpr size_t kFrameHeaderSize = 16;
constexpr size_t kMaxReasonBytes = 4096;
// A record larger than this is refused (a bound on what a peer can make us buffer).
constexpr size_t kMaxRecordBytes = 16u << 20;
// What the ring holds from one neighbour before it stops reading it (TCP then holds the
// sender back): one largest frame, so that a full buffer always starts with a whole one.
constexpr size_t kMaxBufferedBytes = kFrameHeaderSize + kMaxRecordBytes;
constexpr uint32_t kDataFrame = 1;
constexpr uint32_t kFailureFrame = 2;
constexpr const char* kAcceptorLabel = "chorus-ring-acceptor";
constexpr const char* kConnectorLabel = "chorus-ring-connector";

struct Hello {
  uint64_t comm_id = 0;
  int sender = 0;
  int receiver = 0;
  int size = 0;
  bool secret = false;
  Nonce nonce{};
};

std::string Encode(const Hello& h);
// Nothing unless `in` is exactly one hello of this magic and version.
std::optional<Hello> DecodeHello(std::string_view in);

struct Reply {
  bool accept = false;
  bool failed = false;  // the acceptor failed; the reason says why
  int acceptor = 0;
  int size = 0;
  bool secret = false;
  Nonce nonce{};
  Sha256Digest mac{};
  std::string reason;  // cut to kMaxReasonBytes when encoded
};

std::string Encode(const Reply& r);
// The whole length of the reply whose first kReplySize bytes `head` starts with (it
// may hold more); an error for another magic or version, or a reason over the cap.
Result<size_t> ReplyLength(std::string_view head);
// A whole reply, its reason included and nothing after it; an error for anything else
// (an unknown verdict too).
Result<Reply> DecodeReply(std::string_view in);

// A failed reply's reason: the acceptor's status code and message.
std::string FailedReason(StatusCode code, std::string_view message);
struct Failure {
  StatusCode code = StatusCode::kPeerFailed;
  std::string message;
};
// Without a code, or with one out of range, the failure reads as a failed peer.
Failure ParseFailedReason(std::string_view reason);

// The code a failure frame carries: every rank reports the origin's kind of failure (a
// timeout stays a timeout); anything unknown reads as a failed peer.
StatusCode CodeOf(uint32_t code);

std::string Frame(uint32_t kind, uint32_t seq, int origin, std::string_view payload);

struct FrameHead {
  uint32_t kind = 0;
  uint32_t seq = 0;
  int origin = 0;
  size_t len = 0;
};

// The frame at `off` of `buf` (off <= buf.size()): none until it is complete; an error
// when its header is impossible (a length over the cap, an unknown kind). Its payload
// is buf[off + kFrameHeaderSize, + len).
Result<std::optional<FrameHead>> PeekFrame(std::string_view buf, size_t off);

}  // namespace chorus::rendezvous::ring_wire
