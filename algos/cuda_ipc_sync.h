// How the streams of the ranks in a CUDA IPC call (algos/cuda_ipc_collectives) order
// each other. A rank signals a phase of the call on its stream (READY: its inputs are
// written; MID: all_reduce's slice is reduced; DONE: it reads no peer's buffer any
// more) and its peers' streams wait for that signal; nothing spins on the GPU.
//
// Flags (CHORUS_CUDA_IPC_SYNC=flags, the default, where every rank has them): each rank
// has kSyncSlots x 3 flags in its device memory (transport::cuda_ipc::IpcFlags) that its
// peers map. Call number `seq` (the same on every rank: the largest any rank offered)
// signals phase f by writing seq into flag (seq % kSyncSlots, f); a peer's stream waits
// until that flag has reached seq. Where ranks take turns on one GPU (no MPS), such a
// wait hands the GPU over far faster than an interprocess event (docs/design/cuda_ipc.md).
//   Why slots: a rank's successive calls may run on different streams, so a later call's
//   write can land before an earlier one's; with one flag per phase it would satisfy the
//   earlier call's waits too soon. Calls kSyncSlots apart share a slot, so before a call
//   first writes its slot, its stream waits (in this process: a plain event) for the end
//   of the last call that wrote it. A slot's value then only grows, and a flag that has
//   reached seq means call seq signalled.
//
// Events (where some rank has no flags, or asked for them): each rank's three
// interprocess events, one per phase, recorded on its stream; a peer's stream waits for
// the record that the call's host messages announced. An event is recorded again only
// after every peer's stream waited for its previous record (the messages in between
// order it), so one event per phase suffices.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "kernels/cuda/stream_ops.h"
#include "transport/cuda_ipc/cuda_ipc.h"

namespace chorus::algos {

enum SyncPhase : int { kReadyPhase = 0, kMidPhase = 1, kDonePhase = 2 };
constexpr uint32_t kSyncSlots = 64;

// This rank's side, kept between calls (made on first use).
struct SyncState {
  bool want_flags = true;  // CHORUS_CUDA_IPC_SYNC=flags
  std::array<transport::cuda_ipc::IpcEvent, 3> events;
  transport::cuda_ipc::IpcFlags flags;
  std::string no_flags;      // why this rank offers no flags (empty: it does, or has not tried)
  bool told_events = false;  // a call said why it used events (CallSync::NoFlagsOnce)
  uint32_t next_seq = 1;
  std::array<std::shared_ptr<kernels::cuda::StreamEvent>, kSyncSlots> slot_end;  // the last call to write each slot
  transport::cuda_ipc::PeerEvents peer_events;
};

// What a rank tells its peers: its events and, where it has them, its flags.
struct SyncOffer {
  uint8_t has_flags = 0;
  uint32_t next_seq = 0;
  transport::cuda_ipc::ExportedBuffer flags{};
  std::array<transport::cuda_ipc::ExportedEvent, 3> events{};
};

// This rank's offer, its events and flags made on first use. An error: no events (this
// rank cannot take part); flags that cannot be made are only left out (no_flags says why).
Result<SyncOffer> MakeSyncOffer(SyncState& state);

// One call's signals, from every rank's offer.
class CallSync {
 public:
  CallSync(SyncState& state, const std::vector<SyncOffer>& offers, int rank);
  bool flags() const { return flags_; }
  // Makes peer p's signals reachable here (maps its flags, or opens its events). Flags
  // that cannot be mapped are not offered again: later calls use events.
  Status Reach(int p, transport::cuda_ipc::PeerMappings& mappings, Deadline deadline);
  // Signals `phase` on `stream` (in flags, first guarding the slot: see above).
  Status Signal(SyncPhase phase, void* stream);
  // Makes `stream` wait for peer p's signal of `phase` (every peer's: WaitForPeers).
  Status WaitFor(int p, SyncPhase phase, void* stream);
  Status WaitForPeers(SyncPhase phase, void* stream);
  // Where this call uses events and no call said why before: which ranks have no flags
  // and why; else "" (made once, not on every call).
  std::string NoFlagsOnce();
  // The call's work on this rank ends at `end`: what later calls on its slot wait for.
  // Where the call signalled but enqueued nothing after (declined), `end` may be null:
  // an event is recorded on `stream`.
  Status End(std::shared_ptr<kernels::cuda::StreamEvent> end, void* stream);

 private:
  SyncState& state_;
  const std::vector<SyncOffer>& offers_;
  int rank_;
  bool flags_ = false;
  bool wrote_ = false;  // this call signalled on this rank
  uint32_t seq_ = 0;
  std::vector<const uint32_t*> peer_flags_;  // mapped, by rank (flags only)
};

}  // namespace chorus::algos
