// The RDMA transport's control messages: one SEND into a pre-posted receive slot of
// the peer, a fixed header followed by up to `eager_bytes` of payload.
//
//   small message   sender: EAGER{tag, seq, len, fp} + bytes     (the send completes at once)
//   large message   sender: RTS{tag, seq, len, fp, id}
//                   receiver, once a matching Recv is posted: CTS{id, addr, rkey, imm}
//                   sender: RDMA WRITE WITH IMMEDIATE(imm) straight into the Recv's buffer
//                   (or the receiver: NACK{id, reason} when sizes or calls disagree)
//
// A receiver that holds more than `pause_above` bytes of a peer's EAGER messages whose
// Recv is not posted yet sends PAUSE; until RESUME the peer sends every non-empty
// message by RTS (also EAGER messages still queued), so that memory stays bounded.
//
// Every SEND and every WRITE WITH IMMEDIATE consumes one receive slot of the peer, so
// each costs one credit; the peer returns credits in every header it sends (or in a
// CREDIT message when it has nothing else to say), and the receive queue never runs dry.
#pragma once

#include <cstdint>

namespace chorus::transport::rdma {

enum class CtrlType : uint16_t {
  kHello = 1,      // seq: comm id, len: world size, id: rank
  kEager = 2,      // payload: the message
  kRts = 3,        // ready to send
  kCts = 4,        // clear to send: addr/rkey/imm of the receive buffer
  kNack = 5,       // payload: why the receiver refused the message with `id`
  kDataError = 6,  // sender could not write the message for `imm`; payload: why
  kCredit = 7,     // only returns credits
  kPing = 8,       // liveness probe of a silent peer we wait for
  kAbort = 9,      // payload: the reason
  kPong = 10,      // the answer to a PING
  kPause = 11,     // the receiver holds too much of our early EAGER data: send by RTS
  kResume = 12,    // until this
};

struct CtrlHeader {
  uint16_t magic = kMagic;
  uint16_t type = 0;
  uint32_t credits = 0;  // receive slots the sender of this header re-posted
  uint64_t tag = 0;
  uint64_t seq = 0;      // the message's number among the sender's messages with this tag
  uint64_t len = 0;      // message bytes
  uint64_t fp = 0;       // fingerprint
  uint64_t id = 0;       // the sender's id of a large send (RTS/CTS/NACK)
  uint64_t addr = 0;     // CTS: where to write
  uint32_t rkey = 0;     // CTS
  uint32_t imm = 0;      // CTS/DATA_ERROR: the receiver's id of the Recv
  uint32_t payload = 0;  // bytes following the header
  uint32_t reserved = 0;

  static constexpr uint16_t kMagic = 0xC4D5;
};
static_assert(sizeof(CtrlHeader) == 72, "control header layout");

}  // namespace chorus::transport::rdma
