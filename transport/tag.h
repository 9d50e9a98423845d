// The 64-bit tag every message carries, and how collectives lay theirs out:
//
//   bit 63      set for a collective (point-to-point tags are the user's 32-bit tags)
//   bits 16..47 the call's sequence number (per communicator)
//   bits 0..15  the step within the call
//
// Tags that agree above the step bits form a group (one call): the transports match a
// group's fingerprint, forget its state when the call ends, and spread its parts.
#pragma once

#include <cstdint>

namespace chorus::transport {

constexpr int kTagStepBits = 16;
constexpr int kTagSeqBits = 32;
constexpr uint64_t kTagStepMask = (uint64_t{1} << kTagStepBits) - 1;
constexpr uint64_t kTagSeqMask = (uint64_t{1} << kTagSeqBits) - 1;
constexpr uint64_t kCollectiveTagBit = uint64_t{1} << 63;
constexpr uint32_t kMaxTagStep = static_cast<uint32_t>(kTagStepMask);

// Step `step` of collective call `seq`.
constexpr uint64_t CollectiveTag(uint64_t seq, uint32_t step) {
  return kCollectiveTagBit | (seq & kTagSeqMask) << kTagStepBits | (step & kTagStepMask);
}
constexpr bool IsCollectiveTag(uint64_t tag) { return (tag & kCollectiveTagBit) != 0; }

// The group (call) a tag belongs to, and the first and last tags of a group.
constexpr uint64_t TagGroup(uint64_t tag) { return tag >> kTagStepBits; }
constexpr uint64_t GroupFirstTag(uint64_t group) { return group << kTagStepBits; }
constexpr uint64_t GroupLastTag(uint64_t group) { return GroupFirstTag(group) | kTagStepMask; }

}  // namespace chorus::transport
