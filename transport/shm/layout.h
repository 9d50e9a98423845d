// What ranks of one host share: each rank owns one segment (a file under CHORUS_SHM_DIR,
// unlinked once every peer mapped it) holding its Control block and one ring per local
// peer that sends to it. A ring has one writer (the peer) and one reader (the owner):
// the writer moves `head`, the reader `tail`, each on its own cache line.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace chorus::transport::shm {

constexpr uint64_t kMagic = 0x6368727573686d31;  // "chrushm1"
constexpr size_t kLine = 64;

enum class PeerState : uint32_t { kRunning = 0, kAborted = 1, kClosed = 2 };

// The owner's word to its peers, and what they use to wake it.
struct alignas(kLine) Control {
  uint64_t magic = 0;
  uint64_t self_addr = 0;  // where the owner mapped this segment: peers probe reading it (single copy)
  int32_t pid = 0;
  int32_t rank = 0;
  int32_t nslots = 0;
  uint32_t ring_bytes = 0;
  alignas(kLine) std::atomic<uint32_t> doorbell{0};  // futex word: bumped to wake the owner's sleepers
  alignas(kLine) std::atomic<uint32_t> sleepers{0};  // the owner's threads asleep on the doorbell
  alignas(kLine) std::atomic<uint32_t> alert{0};     // bumped by a peer whose state changed
  alignas(kLine) std::atomic<uint32_t> state{0};     // PeerState of the owner
  // The owner reads a large message out of a peer's memory: busy, it would not help
  // a reader of its own messages (kPut) before it is done.
  alignas(kLine) std::atomic<uint32_t> reading{0};
  char reason[480] = {};  // the owner's abort reason, written before state
};

// The ring from one peer into the owner.
struct alignas(kLine) Slot {
  alignas(kLine) std::atomic<uint64_t> head{0};  // bytes written, by the peer
  alignas(kLine) std::atomic<uint64_t> tail{0};  // bytes consumed, by the owner
  // Set by the owner at set-up: it can read the peer's memory (process_vm_readv), so
  // the peer may send large messages as an address instead of through the ring.
  alignas(kLine) std::atomic<uint32_t> single_copy{0};
  // A large message the owner reads and the peer writes together (kPut): each takes
  // the next piece from `claim` (ClaimWord: the message's cookie and the next piece),
  // and the peer counts the pieces it wrote in `written` (kWriteFailed: one failed).
  alignas(kLine) std::atomic<uint64_t> claim{0};
  alignas(kLine) std::atomic<uint64_t> written{0};
};

enum class FrameType : uint32_t {
  kPad = 0,   // the rest of the ring up to its end: skip
  kData = 1,  // bytes [offset, offset + len) of a message of `total` bytes
  // A message of `total` bytes is ready: at address `arg` of the sender (read it, then
  // kAck), or, where arg is 0, to be sent through the ring once asked for (kCts).
  kRts = 2,
  kAck = 3,  // the message `cookie` sent by kRts was read (arg: AckStatus)
  kCts = 4,  // its receive is posted: send message `cookie` as kData frames (which carry the cookie)
  // The receiver of message `cookie` (sent by kRts with an address) reads it in pieces:
  // write the pieces you claim (Slot::claim) at its address `arg`, until none is left.
  kPut = 5,
};

enum class AckStatus : uint64_t { kRead = 0, kDiscarded = 1, kReadFailed = 2 };

// Frames start on a cache line; the payload follows the header.
struct Frame {
  FrameType type;
  uint32_t len;  // payload bytes in this frame
  uint64_t tag;
  uint64_t fingerprint;
  uint64_t total;
  uint64_t arg;  // kData: offset; kRts: address or 0; kAck: AckStatus
  uint64_t cookie;
};
static_assert(sizeof(Frame) == 48, "frame header layout");

inline constexpr size_t AlignLine(size_t n) { return (n + kLine - 1) & ~(kLine - 1); }
inline constexpr size_t FrameBytes(size_t payload) { return AlignLine(sizeof(Frame) + payload); }

// A message read together is cut in pieces of an eighth, 64 KiB to 1 MiB (both sides
// compute the same), at most 2^kPieceBits of them.
constexpr uint64_t kPieceBits = 24;
inline constexpr uint64_t PieceBytes(uint64_t total) {
  const uint64_t eighth =
      std::min<uint64_t>(std::max<uint64_t>((total / 8 + 4095) & ~uint64_t{4095}, 64 << 10), 1 << 20);
  return std::max<uint64_t>(eighth, (total >> kPieceBits) + 1);
}
inline constexpr uint64_t Pieces(uint64_t total) { return (total + PieceBytes(total) - 1) / PieceBytes(total); }
inline constexpr uint64_t ClaimWord(uint64_t cookie, uint64_t piece) { return (cookie << kPieceBits) | piece; }
constexpr uint64_t kWriteFailed = uint64_t{1} << 63;

// Takes the next of the `pieces` of message `cookie`: false once none is left, or the
// slot holds another message (a late kPut).
inline bool ClaimPiece(std::atomic<uint64_t>& claim, uint64_t cookie, uint64_t pieces, uint64_t* piece) {
  uint64_t w = claim.load(std::memory_order_acquire);
  do {
    if ((w >> kPieceBits) != (ClaimWord(cookie, 0) >> kPieceBits)) return false;
    *piece = w & ((uint64_t{1} << kPieceBits) - 1);
    if (*piece >= pieces) return false;
  } while (!claim.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
}

inline constexpr size_t SlotBytes(size_t ring_bytes) { return sizeof(Slot) + ring_bytes; }
inline constexpr size_t SegmentBytes(int nslots, size_t ring_bytes) {
  return sizeof(Control) + static_cast<size_t>(nslots) * SlotBytes(ring_bytes);
}
inline Control* ControlAt(void* base) { return static_cast<Control*>(base); }
inline Slot* SlotAt(void* base, int i, size_t ring_bytes) {
  return reinterpret_cast<Slot*>(static_cast<char*>(base) + sizeof(Control) + i * SlotBytes(ring_bytes));
}
inline char* RingData(Slot* s) { return reinterpret_cast<char*>(s) + sizeof(Slot); }

}  // namespace chorus::transport::shm
