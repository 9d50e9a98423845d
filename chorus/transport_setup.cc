#include "chorus/transport_setup.h"

#include "chorus/log.h"
#include "rendezvous/net_util.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {

Result<TransportSetup> SetUpTransport(const Config& config, rendezvous::Store& store, const std::string& prefix,
                                      int rank, int size, uint64_t comm_id, const std::string& master_addr,
                                      Deadline deadline) {
  // 1. Open what the configuration allows: the interface that reaches the master (or
  // CHORUS_SOCKET_IFNAME's) for TCP, and to pick the RoCE GID.
  Result<std::string> addr = rendezvous::SelectInterfaceAddress(config.socket_ifname, master_addr);
  if (!addr.ok()) return addr.status();
  rendezvous::PeerInfo me = rendezvous::PeerInfo::Local(rank);
  me.cuda_ipc_off = config.cuda_ipc == "off";
  me.tcp_lanes = config.tcp_lanes;
  std::unique_ptr<transport::RdmaTransport> rdma;
  if (config.transport != "tcp") {
    auto r = transport::RdmaTransport::Open(rank, size, comm_id, transport::RdmaOptions::FromConfig(config, addr.value()));
    if (r.ok()) {
      rdma = std::move(r.value());
      me.rdma_address = rdma->address();
    } else {
      me.rdma_unavailable = r.status().message();
      if (config.transport == "rdma") CHORUS_WARN("rank " << rank << ": " << r.status().message());
    }
  }
  std::unique_ptr<transport::TcpTransport> tcp;
  if (config.transport != "rdma") {
    auto t = transport::TcpTransport::Listen(rank, size, comm_id, transport::TcpOptions::FromConfig(config, addr.value()));
    if (!t.ok()) return t.status();
    tcp = std::move(t.value());
    me.tcp_address = tcp->address();
  }

  // 2. Everyone learns what everyone has (a rank that cannot do RDMA still takes part,
  // so that every rank fails with the same clear error instead of a timeout).
  Result<std::vector<std::string>> all = rendezvous::AllGather(store, prefix + "peers", rank, size, me.Serialize(), deadline);
  if (!all.ok()) return all.status();
  TransportSetup out;
  std::vector<std::string> rdma_addrs, hosts;
  std::string without_rdma;
  for (int r = 0; r < size; ++r) {
    Result<rendezvous::PeerInfo> info = rendezvous::PeerInfo::Parse(all.value()[r]);
    if (!info.ok()) return info.status().WithContext("peer info of rank " + std::to_string(r));
    out.peers.push_back(info.value());
    rdma_addrs.push_back(info.value().rdma_address);
    hosts.push_back(info.value().hostname);
    if (info.value().rdma_address.empty() && without_rdma.empty()) {
      without_rdma = "rank " + std::to_string(r) + " (host " + info.value().hostname + ") " +
                     (info.value().rdma_unavailable.empty() ? "uses CHORUS_TRANSPORT=tcp"
                                                            : "has no RDMA: " + info.value().rdma_unavailable);
    }
  }

  // 3. The same choice on every rank, then connect it.
  if (without_rdma.empty() && rdma) {
    out.choice = "rdma (every rank has a verbs device)";
    CHORUS_RETURN_IF_ERROR(rdma->Connect(rdma_addrs, hosts));
    // Every queue pair must be ready to receive before any rank sends its HELLO.
    CHORUS_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix + "rdma_ready", rank, size, deadline));
    CHORUS_RETURN_IF_ERROR(rdma->Start(deadline));
    out.transport = std::move(rdma);
  } else if (config.transport == "rdma") {
    return Unavailable("rank " + std::to_string(rank) + ": CHORUS_TRANSPORT=rdma, but " + without_rdma);
  } else {
    out.choice = config.transport == "tcp" ? "tcp (CHORUS_TRANSPORT=tcp)" : "tcp (" + without_rdma + ")";
    rdma.reset();
    const std::map<std::string, rendezvous::HostShare> hosts = rendezvous::HostShares(out.peers);
    std::vector<transport::PeerAddress> addresses;
    for (const rendezvous::PeerInfo& p : out.peers) {
      const rendezvous::HostShare& h = hosts.at(p.host_id);
      const int lanes = p.tcp_lanes > 0 ? p.tcp_lanes : transport::AutoLanes(h.cores, h.ranks);
      addresses.push_back({p.tcp_address, p.hostname, lanes});
    }
    CHORUS_RETURN_IF_ERROR(tcp->Connect(addresses, deadline));
    out.transport = std::move(tcp);
  }
  CHORUS_INFO("rank " << rank << ": transport " << out.choice);
  return out;
}

}  // namespace chorus
