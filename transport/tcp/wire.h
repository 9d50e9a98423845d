// The bytes chorus's TCP transport puts on the wire.
//
// All integers are little-endian and fixed-size, so the encoding does not depend on
// struct layout or padding.
//
// 1. Handshake, once per socket, before any frame. The higher rank connects to the
//    lower one, opening `nsockets` sockets to it (indexes 0..nsockets-1).
//      Hello (connector -> acceptor), kHelloSize bytes:
//        u32 magic = kHandshakeMagic   u16 version = kProtocolVersion   u16 flags
//        u64 comm_id
//        i32 sender rank   i32 receiver rank   i32 world size
//        i32 socket index  i32 nsockets        i32 zero
//        16 bytes: the connector's nonce Nc
//      Reply (acceptor -> connector), kReplySize bytes, then `reason_len` bytes:
//        u32 magic   u16 version   u16 verdict (0 accept, 1 reject, 2 crossed)
//        u64 comm_id of the acceptor
//        i32 acceptor rank   i32 connector rank (as the acceptor saw it)
//        i32 world size      i32 nsockets   u32 reason_len (<= kMaxReasonLen)   u32 flags
//        16 bytes: the acceptor's nonce Na
//        32 bytes: MAC_A = HMAC(secret, "chorus-tcp-acceptor", Hello bytes, Na)
//      Proof (connector -> acceptor, only after an accepting Reply when both have a
//      job secret), kProofSize bytes:
//        32 bytes: MAC_C = HMAC(secret, "chorus-tcp-connector", Hello bytes, Na)
//    Hello flags bit 1 (kFlagLazy): the connector makes its connections when first
//    needed (CHORUS_TCP_CONNECT=lazy); then either rank of a pair may dial, and an
//    acceptor that dials the connector itself answers a dial from a lower rank with
//    "crossed": that socket closes unused and the higher rank's dial carries the pair
//    (tcp_lazy.cc). Reply flags bit 2 (kFlagAborted), on a rejection: the acceptor's
//    communicator aborted (the reason says why); the connector's is doomed as well.
//    A rank that aborts with a pair half made writes an ABORT frame (below) on each of
//    its sockets before it closes them: the peer's engine, or acceptor, reads the reason.
//    flags bit 0 (kFlagSecret): this side has a job secret. The MACs (zeros without a
//    secret) cover the whole Hello, so a connection proves comm_id, sender, receiver
//    and socket index; the two labels keep one side's MAC from standing for the
//    other's (docs/design/job_secret.md).
//    The acceptor checks every Hello field against its own values and rejects with a
//    reason naming both sides' values; a job secret on one side only is rejected the
//    same way. The connector checks the Reply the same way and MAC_A (a stray process
//    answering on the address is caught in both directions); the acceptor checks
//    MAC_C and drops a connection that fails it without taking its slot.
//
// 2. Frames, in both directions on every socket, each a kFrameHeaderSize-byte header
//    followed by `len` payload bytes:
//        u32 magic = kFrameMagic   u32 type (kData, kAbort)
//        u64 tag        u64 tag_seq (index of this message among the sender's messages
//                                    to this peer with this tag)
//        u64 total_len  u64 offset  u64 len   u64 fingerprint   u64 check (xor of the above)
//    A DATA message of total_len >= stripe_min_bytes is split into nsockets stripes
//    (stripe i on socket i, contiguous, each non-empty); a smaller one goes whole on one
//    socket. A 0-byte message is one frame with len 0. The receiver matches a frame to
//    the n-th Recv posted for (peer, tag) by tag_seq, so stripes and messages may arrive
//    on any socket in any order.
//    An ABORT frame carries the sender's reason as its payload (tag, seq, offset and
//    fingerprint are 0, total_len == len <= kMaxReasonLen): the receiver fails every
//    request involving that peer.
//    Rendezvous (point-to-point messages of kRendezvousBytes and more, engine.cc): the
//    sender's DATA frames of such a message go only after a READY frame (receiver ->
//    sender: tag, tag_seq of the message; no payload) that says its Recv is posted. A
//    sender that has no READY yet sends an RTS frame (tag, tag_seq, total_len; no
//    payload) and waits; a receiver sends READY when it posts a Recv of that size or
//    more, or when an RTS finds (or later gets) its Recv posted.
//    PAUSE / RESUME (receiver -> sender; no fields): the receiver holds too many bytes
//    of messages whose Recv is not posted yet; until RESUME the sender sends every
//    non-empty message by rendezvous.
//    PING / PONG (no fields, on a peer's first socket): a rank whose requests wait on a
//    peer that has sent nothing for a while asks whether it is alive; the peer's engine
//    answers PONG. Any frame from a peer proves it alive (docs/design/tcp_liveness.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::transport::tcp {

constexpr uint32_t kHandshakeMagic = 0x43485348;  // "CHSH"
constexpr uint32_t kFrameMagic = 0x43484652;      // "CHFR"
// 2: READY, RTS, PAUSE, RESUME frames; 3: the job secret's nonces and MACs, PING, PONG;
// 4: the lazy flag and the crossed verdict; 5: the aborted flag.
constexpr uint16_t kProtocolVersion = 5;
constexpr size_t kHelloSize = 56;
constexpr size_t kReplySize = 88;
constexpr size_t kProofSize = 32;
constexpr uint32_t kFlagSecret = 1;
constexpr uint32_t kFlagLazy = 2;
constexpr uint32_t kFlagAborted = 4;
constexpr size_t kFrameHeaderSize = 64;
constexpr uint32_t kMaxReasonLen = 4096;
// No message may claim more than this (2^48 bytes): a larger total_len is a corrupt
// stream, not a request to allocate it.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 48;

struct Hello {
  uint64_t comm_id = 0;
  int32_t sender = 0;
  int32_t receiver = 0;
  int32_t world_size = 0;
  int32_t socket_index = 0;
  int32_t nsockets = 0;
  bool has_secret = false;
  bool lazy = false;  // kFlagLazy
  Nonce nonce{};
};

struct Reply {
  bool accept = false;
  bool crossed = false;  // not accepted: the acceptor's own dial carries the pair
  bool aborted = false;  // rejected: the acceptor's communicator aborted (kFlagAborted)
  uint64_t comm_id = 0;
  int32_t acceptor = 0;
  int32_t connector = 0;
  int32_t world_size = 0;
  int32_t nsockets = 0;
  bool has_secret = false;
  Nonce nonce{};
  Sha256Digest mac{};  // MAC_A; zeros without a secret
  std::string reason;  // empty when accepted
};

enum class FrameType : uint32_t {
  kData = 1,
  kAbort = 2,
  kReady = 3,
  kRts = 4,
  kPause = 5,
  kResume = 6,
  kPing = 7,
  kPong = 8,
};
// READY, RTS, PAUSE, RESUME, PING and PONG carry no payload (see the top of this file).
inline bool IsControlFrame(FrameType t) { return t >= FrameType::kReady && t <= FrameType::kPong; }

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint64_t tag = 0;
  uint64_t tag_seq = 0;
  uint64_t total_len = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  uint64_t fingerprint = 0;
};

void EncodeHello(const Hello& h, uint8_t out[kHelloSize]);
// Fails (kProtocolError) on a bad magic or version, naming what was received.
Result<Hello> DecodeHello(const uint8_t in[kHelloSize]);

// Writes the fixed part; the reason (truncated to kMaxReasonLen) follows it on the wire.
void EncodeReply(const Reply& r, uint8_t out[kReplySize]);
// Decodes the fixed part; the caller reads `*reason_len` more bytes into reason.
Result<Reply> DecodeReply(const uint8_t in[kReplySize], uint32_t* reason_len);

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);
// A whole ABORT frame: its header and the reason (truncated to kMaxReasonLen).
std::string EncodeAbortFrame(const std::string& reason);
// Validates magic, type, check word and offset/len/total_len consistency.
Result<FrameHeader> DecodeFrameHeader(const uint8_t in[kFrameHeaderSize]);

}  // namespace chorus::transport::tcp
