#include "transport/rdma/rdma_transport.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "common/log.h"
#include "transport/matching.h"
#include "transport/rdma/engine.h"

namespace chorus::transport {

using rdma::QpAddress;

namespace {

// "rdma1 <gid hex> <lid> <mtu> <qpn>:<psn> ..." with one queue pair per rank (ours: 0:0).
std::string EncodeAddress(const std::vector<QpAddress>& qps, const QpAddress& any) {
  std::string s = "rdma1 ";
  char hex[3];
  for (uint8_t b : any.gid.raw) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    s += hex;
  }
  s += " " + std::to_string(any.lid) + " " + std::to_string(any.mtu);
  for (const QpAddress& q : qps) s += " " + std::to_string(q.qpn) + ":" + std::to_string(q.psn);
  return s;
}

// Rank `owner`'s queue pair for rank `me`, from owner's published text.
Result<QpAddress> DecodeAddress(const std::string& text, int owner, int me, int size) {
  const Status bad = ProtocolError("rank " + std::to_string(owner) + " published a malformed RDMA address '" +
                                   text.substr(0, 80) + "'");
  std::istringstream in(text);
  std::string magic, gid;
  QpAddress a;
  unsigned lid = 0, mtu = 0;
  if (!(in >> magic >> gid >> lid >> mtu) || magic != "rdma1" || gid.size() != 32) return bad;
  for (int i = 0; i < 16; ++i) {
    unsigned byte = 0;
    if (std::sscanf(gid.c_str() + 2 * i, "%2x", &byte) != 1) return bad;
    a.gid.raw[i] = static_cast<uint8_t>(byte);
  }
  a.lid = static_cast<uint16_t>(lid);
  a.mtu = static_cast<uint8_t>(mtu);
  std::string qp;
  for (int r = 0; r < size; ++r) {
    if (!(in >> qp)) return bad;
    if (r != me) continue;
    unsigned long qpn = 0, psn = 0;
    if (std::sscanf(qp.c_str(), "%lu:%lu", &qpn, &psn) != 2) return bad;
    a.qpn = static_cast<uint32_t>(qpn);
    a.psn = static_cast<uint32_t>(psn);
  }
  return a;
}

}  // namespace

RdmaTransport::RdmaTransport(int rank, int size) : rank_(rank), size_(size) {}
RdmaTransport::~RdmaTransport() = default;

Result<std::unique_ptr<RdmaTransport>> RdmaTransport::Open(int rank, int size, uint64_t comm_id,
                                                           const RdmaOptions& opts) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("RDMA transport: rank " + std::to_string(rank) + " is not in a world of size " +
                           std::to_string(size));
  }
  Result<const rdma::Verbs*> verbs = rdma::LoadVerbs();
  if (!verbs.ok()) return verbs.status();
  rdma::DeviceOptions dopts;
  dopts.hca = opts.hca;
  dopts.gid_index = opts.gid_index;
  dopts.local_ip = opts.local_ip;
  Result<std::unique_ptr<rdma::Device>> dev = rdma::Device::Open(verbs.value(), dopts);
  if (!dev.ok()) return dev.status();
  const rdma::QpAddress any{dev.value()->gid(), dev.value()->lid(), static_cast<uint8_t>(dev.value()->mtu())};
  rdma::EngineOptions eopts;
  eopts.rank = rank;
  eopts.size = size;
  eopts.comm_id = comm_id;
  eopts.timeout_ms = opts.timeout_ms;
  eopts.eager_bytes = opts.eager_bytes;
  eopts.poll_us = opts.poll_us;
  eopts.peer_timeout_ms = opts.peer_timeout_ms;
  eopts.pause_above = opts.pause_above;
  eopts.resume_below = opts.resume_below;
  Result<std::unique_ptr<rdma::Engine>> engine = rdma::Engine::Create(std::move(dev.value()), eopts);
  if (!engine.ok()) return engine.status().WithContext("rank " + std::to_string(rank));
  std::unique_ptr<RdmaTransport> t(new RdmaTransport(rank, size));
  t->engine_ = std::move(engine.value());
  t->address_ = EncodeAddress(t->engine_->LocalAddresses(), any);
  return t;
}

Status RdmaTransport::Connect(const std::vector<std::string>& addresses, const std::vector<std::string>& hosts) {
  if (static_cast<int>(addresses.size()) != size_) {
    return InvalidArgument("RDMA transport: " + std::to_string(addresses.size()) + " addresses for " +
                           std::to_string(size_) + " ranks");
  }
  std::vector<QpAddress> remote(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Result<QpAddress> a = DecodeAddress(addresses[r], r, rank_, size_);
    if (!a.ok()) return a.status();
    remote[r] = a.value();
  }
  return engine_->Connect(remote, hosts);
}

Status RdmaTransport::Start(Deadline deadline) {
  if (!pre_start_error_.ok()) return pre_start_error_;
  Status st = engine_->Start(deadline);
  started_ = true;
  if (st.ok()) CHORUS_INFO("rank " << rank_ << ": " << Describe());
  return st;
}

RequestPtr RdmaTransport::Post(bool send, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  const auto kind = send ? BasicRequest::Kind::kSend : BasicRequest::Kind::kRecv;
  Status bad = ValidatePost(rank_, size_, send, peer, buf, bytes);
  if (bad.ok() && !started_) {
    bad = pre_start_error_.ok() ? Unavailable("rank " + std::to_string(rank_) + ": RDMA transport used before Start()")
                                : pre_start_error_;
  }
  if (!bad.ok()) {
    auto req = std::make_shared<BasicRequest>(kind, rank_, peer, tag, buf, bytes, fingerprint);
    req->Complete(bad);
    return req;
  }
  return engine_->Post(kind, peer, tag, buf, bytes, fingerprint);
}

RequestPtr RdmaTransport::Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint) {
  return Post(true, peer, tag, const_cast<void*>(buf), bytes, fingerprint);
}

RequestPtr RdmaTransport::Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  return Post(false, peer, tag, buf, bytes, fingerprint);
}

void RdmaTransport::ReleaseTags(uint64_t first, uint64_t last) {
  if (started_) engine_->ReleaseTags(first, last);
}

void RdmaTransport::Abort(const Status& reason) {
  if (started_) {
    engine_->Abort(reason);
  } else if (pre_start_error_.ok()) {
    pre_start_error_ = reason;
  }
}

Status RdmaTransport::health() { return started_ ? engine_->health() : pre_start_error_; }

std::string RdmaTransport::Describe() const { return engine_->Describe(); }
TrafficCounters RdmaTransport::counters() const { return started_ ? engine_->counters() : TrafficCounters{}; }

}  // namespace chorus::transport
