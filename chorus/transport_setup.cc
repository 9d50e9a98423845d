#include "chorus/transport_setup.h"

#include <map>

#include "common/log.h"
#include "rendezvous/net_util.h"
#include "transport/per_peer.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {
namespace {

using rendezvous::PeerInfo;

// The groups of ranks that share memory: same host, same pid namespace, and shared
// memory wanted by each (CHORUS_TRANSPORT auto or shm; a host where one rank said
// tcp/rdma is a group of one per rank). Each group in rank order; every rank computes
// the same groups from the same peer infos. group_of[r]: the index of rank r's group.
std::vector<std::vector<int>> ShmGroups(const std::vector<PeerInfo>& peers, std::vector<int>* group_of) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> by_host;
  for (const PeerInfo& p : peers) by_host[{p.host_id, p.pid_ns}].push_back(p.rank);
  std::vector<std::vector<int>> groups;
  for (auto& [host, ranks] : by_host) {
    bool wanted = true;
    for (int r : ranks) wanted &= peers[r].shm != PeerInfo::Shm::kNo;
    if (wanted) {
      groups.push_back(std::move(ranks));
    } else {
      for (int r : ranks) groups.push_back({r});
    }
  }
  group_of->assign(peers.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int r : groups[g]) (*group_of)[r] = static_cast<int>(g);
  }
  return groups;
}

// Why `group` cannot share memory ("" when every rank of it made its segment).
std::string NoShmReason(const std::vector<PeerInfo>& peers, const std::vector<int>& group,
                        const std::vector<std::string>& offers) {
  for (int r : group) {
    if (offers[r].rfind("ok ", 0) != 0) {
      return "rank " + std::to_string(r) + " (host " + peers[r].hostname + ") has no shared-memory segment: " + offers[r];
    }
  }
  return "";
}

// Phase 2 of shared memory, once every rank of the group made its segment: mapping.
Status ConnectShm(transport::ShmTransport& shm, const std::vector<PeerInfo>& peers, const std::vector<int>& group,
                  const std::vector<std::string>& offers) {
  std::vector<std::string> paths;
  std::vector<int> pids;
  for (int r : group) {
    paths.push_back(offers[r].substr(3));
    pids.push_back(peers[r].pid);
  }
  return shm.Connect(paths, pids);
}

}  // namespace

Result<TransportSetup> SetUpTransport(const Config& config, rendezvous::Store& store, const std::string& prefix,
                                      int rank, int size, uint64_t comm_id, const std::string& master_addr,
                                      Deadline deadline) {
  // 1. Open what the configuration allows: the interface that reaches the master (or
  // CHORUS_SOCKET_IFNAME's) for TCP, and to pick the RoCE GID.
  Result<std::string> addr = rendezvous::SelectInterfaceAddress(config.socket_ifname, master_addr);
  if (!addr.ok()) return addr.status();
  PeerInfo me = PeerInfo::Local(rank);
  if (!config.host_id.empty()) me.host_id = config.host_id;
  me.shm = config.transport == "shm"    ? PeerInfo::Shm::kNeed
           : config.transport == "auto" ? PeerInfo::Shm::kWant
                                        : PeerInfo::Shm::kNo;
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
    Result<PeerInfo> info = PeerInfo::Parse(all.value()[r]);
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

  // 3. Shared memory within hosts: each rank of a group of several makes its segment,
  // all say whether they could, every group decides alike, then maps and probes. The
  // whole world takes part in the exchanges whenever some group has several ranks.
  const std::map<std::string, rendezvous::HostShare> shares = rendezvous::HostShares(out.peers);
  std::vector<int> group_of;
  const std::vector<std::vector<int>> groups = ShmGroups(out.peers, &group_of);
  bool some_group = false;
  for (const auto& g : groups) some_group |= g.size() > 1;
  const std::vector<int>& group = groups[group_of[rank]];
  std::unique_ptr<transport::ShmTransport> shm;
  std::string shm_why;
  bool every_host_shm = false;
  if (some_group) {
    std::string offer = "-";
    if (group.size() > 1) {
      auto s = transport::ShmTransport::Create(transport::ShmOptions::FromConfig(config, rank, size, group, comm_id));
      offer = s.ok() ? "ok " + s.value()->path() : s.status().message();
      if (s.ok()) shm = std::move(s.value());
    }
    Result<std::vector<std::string>> offers = rendezvous::AllGather(store, prefix + "shm", rank, size, offer, deadline);
    if (!offers.ok()) return offers.status();
    // Every rank reaches the same verdicts from the same offers: which hosts share memory
    // (the cost model's link within hosts must be the same everywhere), and whether a
    // host where some rank asked for shm (CHORUS_TRANSPORT=shm) cannot.
    every_host_shm = true;
    std::string forced_failure;
    for (const std::vector<int>& g : groups) {
      if (g.size() < 2) continue;
      const std::string why = NoShmReason(out.peers, g, offers.value());
      if (why.empty()) continue;
      every_host_shm = false;
      for (int q : g) {
        if (out.peers[q].shm == PeerInfo::Shm::kNeed && forced_failure.empty()) forced_failure = why;
      }
    }
    if (!forced_failure.empty()) {
      // Every rank fails alike; the store's host waits until all have read the offers.
      (void)rendezvous::Barrier(store, prefix + "shm_failed", rank, size, deadline);
      return Unavailable("rank " + std::to_string(rank) + ": CHORUS_TRANSPORT=shm, but " + forced_failure);
    }
    if (group.size() > 1) {
      shm_why = NoShmReason(out.peers, group, offers.value());
      if (shm_why.empty()) {
        CHORUS_RETURN_IF_ERROR(ConnectShm(*shm, out.peers, group, offers.value()));
      } else {
        shm.reset();
        if (rank == group[0]) CHORUS_WARN("host " << me.hostname << ": shared memory off, TCP instead: " << shm_why);
      }
    }
    // Every segment is mapped before any is unlinked.
    CHORUS_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix + "shm_mapped", rank, size, deadline));
    if (shm) CHORUS_RETURN_IF_ERROR(shm->Start());
  }

  // 4. Between hosts (or where shared memory is off): the same network choice on every
  // rank, then connect it. With one group sharing memory throughout, none is needed.
  const bool need_network = !(groups.size() == 1 && every_host_shm);
  std::unique_ptr<transport::Transport> network;
  std::string network_choice;
  if (!need_network) {
    rdma.reset();
    tcp.reset();
  } else if (without_rdma.empty() && rdma) {
    network_choice = "rdma (every rank has a verbs device)";
    out.intra = out.inter = algos::LinkKind::kRdma;
    CHORUS_RETURN_IF_ERROR(rdma->Connect(rdma_addrs, hosts));
    // Every queue pair must be ready to receive before any rank sends its HELLO.
    CHORUS_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix + "rdma_ready", rank, size, deadline));
    CHORUS_RETURN_IF_ERROR(rdma->Start(deadline));
    network = std::move(rdma);
  } else if (config.transport == "rdma") {
    return Unavailable("rank " + std::to_string(rank) + ": CHORUS_TRANSPORT=rdma, but " + without_rdma);
  } else {
    network_choice = config.transport == "tcp" ? "tcp (CHORUS_TRANSPORT=tcp)" : "tcp (" + without_rdma + ")";
    rdma.reset();
    std::vector<transport::PeerAddress> addresses;
    for (const PeerInfo& p : out.peers) {
      const rendezvous::HostShare& h = shares.at(p.host_id);
      const int lanes = p.tcp_lanes > 0 ? p.tcp_lanes : transport::AutoLanes(h.cores, h.ranks);
      addresses.push_back({p.tcp_address, p.hostname, lanes});
    }
    CHORUS_RETURN_IF_ERROR(tcp->Connect(addresses, deadline));
    network = std::move(tcp);
  }

  // 5. One transport: shared memory for this host's ranks, the network for the others.
  const std::string shm_choice = "shm between the " + std::to_string(group.size()) + " ranks of this host";
  if (every_host_shm) out.intra = algos::LinkKind::kShm;
  if (shm && network) {
    std::vector<int> route(size, 1);
    for (int r : group) route[r] = 0;
    std::vector<std::unique_ptr<transport::Transport>> parts;
    parts.push_back(std::move(shm));
    parts.push_back(std::move(network));
    out.transport = std::make_unique<transport::PerPeerTransport>(std::move(parts), std::move(route));
    out.choice = shm_choice + ", " + network_choice + " between hosts";
  } else if (shm) {
    out.transport = std::move(shm);
    out.choice = shm_choice;
  } else {
    out.transport = std::move(network);
    out.choice = network_choice + (shm_why.empty() ? "" : " (no shared memory: " + shm_why + ")");
  }
  CHORUS_INFO("rank " << rank << ": transport " << out.choice);
  return out;
}

}  // namespace chorus
