#include "transport/per_peer.h"

namespace chorus::transport {

PerPeerTransport::PerPeerTransport(std::vector<std::unique_ptr<Transport>> parts, std::vector<int> route)
    : parts_(std::move(parts)), route_(std::move(route)) {}

PerPeerTransport::~PerPeerTransport() {
  // A part that failed takes the others down with it, so their peers hear of it too.
  Status st = health();
  if (!st.ok()) Abort(st);
}

Transport& PerPeerTransport::For(int peer) {
  // A peer out of range goes to the first part, whose checks name it.
  return *parts_[peer >= 0 && peer < size() ? route_[peer] : 0];
}

RequestPtr PerPeerTransport::Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint) {
  return For(peer).Send(peer, tag, buf, bytes, fingerprint);
}

RequestPtr PerPeerTransport::Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  return For(peer).Recv(peer, tag, buf, bytes, fingerprint);
}

void PerPeerTransport::ReleaseTags(uint64_t first, uint64_t last) {
  for (auto& p : parts_) p->ReleaseTags(first, last);
}

void PerPeerTransport::Progress() {
  for (auto& p : parts_) p->Progress();
}

void PerPeerTransport::Abort(const Status& reason) {
  for (auto& p : parts_) p->Abort(reason);
}

Status PerPeerTransport::health() {
  for (auto& p : parts_) {
    Status st = p->health();
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

std::string PerPeerTransport::Describe() const {
  std::string s;
  for (const auto& p : parts_) s += (s.empty() ? "" : " + ") + p->Describe();
  return s;
}

TrafficCounters PerPeerTransport::counters() const {
  TrafficCounters sum{};
  for (const auto& p : parts_) {
    TrafficCounters c = p->counters();
    sum.early_messages += c.early_messages;
    sum.early_bytes += c.early_bytes;
    sum.read_messages += c.read_messages;
    sum.written_pieces += c.written_pieces;
  }
  return sum;
}

}  // namespace chorus::transport
