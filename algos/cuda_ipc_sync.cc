#include "algos/cuda_ipc_sync.h"

#include <utility>

#include "kernels/cuda/signal_flags.h"

namespace chorus::algos {

namespace ipc = transport::cuda_ipc;
namespace kcuda = kernels::cuda;

Result<SyncOffer> MakeSyncOffer(SyncState& state) {
  if (!state.events[0].valid()) {
    for (ipc::IpcEvent& ev : state.events) {
      Result<ipc::IpcEvent> made = ipc::IpcEvent::Create();
      if (!made.ok()) {
        state.events[0] = ipc::IpcEvent();  // made again by the next call that asks
        return made.status();
      }
      ev = std::move(made.value());
    }
  }
  if (!state.want_flags && state.no_flags.empty()) state.no_flags = "CHORUS_CUDA_IPC_SYNC=events";
  if (!state.flags.valid() && state.no_flags.empty()) {
    Result<ipc::IpcFlags> made = ipc::IpcFlags::Create(3 * kSyncSlots);
    if (made.ok()) {
      state.flags = std::move(made.value());
    } else {
      state.no_flags = made.status().message();
    }
  }
  SyncOffer o;
  for (int f = 0; f < 3; ++f) o.events[f] = state.events[f].exported();
  o.next_seq = state.next_seq;
  if (state.flags.valid() && state.no_flags.empty()) {
    o.has_flags = 1;
    o.flags = state.flags.exported();
  }
  return o;
}

CallSync::CallSync(SyncState& state, const std::vector<SyncOffer>& offers, int rank)
    : state_(state), offers_(offers), rank_(rank), peer_flags_(offers.size()) {
  flags_ = true;
  seq_ = offers[0].next_seq;
  for (const SyncOffer& o : offers) {
    flags_ = flags_ && o.has_flags != 0;
    if (static_cast<int32_t>(o.next_seq - seq_) > 0) seq_ = o.next_seq;  // the largest (cyclic)
  }
  state_.next_seq = seq_ + 1;
}

Status CallSync::Reach(int p, ipc::PeerMappings& mappings, Deadline deadline) {
  if (!flags_) {
    for (const ipc::ExportedEvent& ev : offers_[p].events) {
      Result<void*> opened = state_.peer_events.Open(ev);
      if (!opened.ok()) return opened.status();
    }
    return Status::Ok();
  }
  Result<void*> mapped = mappings.Map(p, offers_[p].flags, deadline);
  if (!mapped.ok()) {
    state_.no_flags = "mapping rank " + std::to_string(p) + "'s flags: " + mapped.status().message();
    return mapped.status();
  }
  peer_flags_[p] = static_cast<const uint32_t*>(mapped.value());
  return Status::Ok();
}

Status CallSync::Signal(SyncPhase phase, void* stream) {
  if (!flags_) return state_.events[phase].Record(stream);
  const uint32_t slot = seq_ % kSyncSlots;
  if (!wrote_) {
    // The slot's last writer must have written first (see the header).
    const std::shared_ptr<kcuda::StreamEvent>& last = state_.slot_end[slot];
    if (last && !last->Reached()) CHORUS_RETURN_IF_ERROR(last->EnqueueWaitOn(stream));
    wrote_ = true;
  }
  return state_.flags.Write(stream, slot * 3 + phase, seq_);
}

Status CallSync::WaitFor(int p, SyncPhase phase, void* stream) {
  if (!flags_) return state_.peer_events.StreamWait(stream, offers_[p].events[phase]);
  return kcuda::EnqueueWaitFlagReached(stream, peer_flags_[p] + (seq_ % kSyncSlots) * 3 + phase, seq_);
}

Status CallSync::WaitForPeers(SyncPhase phase, void* stream) {
  for (int p = 0; p < static_cast<int>(offers_.size()); ++p) {
    if (p != rank_) CHORUS_RETURN_IF_ERROR(WaitFor(p, phase, stream));
  }
  return Status::Ok();
}

std::string CallSync::NoFlagsOnce() {
  if (flags_ || state_.told_events) return "";
  state_.told_events = true;
  std::string why = state_.no_flags.empty() ? "" : "this rank: " + state_.no_flags;
  for (int p = 0; p < static_cast<int>(offers_.size()); ++p) {
    if (p == rank_ || offers_[p].has_flags) continue;
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + " offers none";
  }
  return why;
}

Status CallSync::End(std::shared_ptr<kcuda::StreamEvent> end, void* stream) {
  if (!flags_ || !wrote_) return Status::Ok();
  if (!end) {
    Result<kcuda::StreamEvent> event = kcuda::StreamEvent::Record(stream);
    if (!event.ok()) return event.status();
    end = std::make_shared<kcuda::StreamEvent>(std::move(event.value()));
  }
  state_.slot_end[seq_ % kSyncSlots] = std::move(end);
  return Status::Ok();
}

}  // namespace chorus::algos
