#include "chorus/transport_setup.h"

#include <map>
#include <optional>

#include "common/log.h"
#include "rendezvous/bootstrap_ring.h"
#include "rendezvous/net_util.h"
#include "transport/per_peer.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {
namespace {

using rendezvous::PeerInfo;

// Each transport's options from the settings: the transports know their own options,
// not the API's configuration.
transport::RdmaOptions RdmaOptionsFor(const Config& config, const std::string& local_ip) {
  transport::RdmaOptions o;
  o.hca = config.ib_hca;
  o.gid_index = config.ib_gid_index;
  o.local_ip = local_ip;
  o.timeout_ms = config.timeout_ms;
  o.eager_bytes = static_cast<uint32_t>(config.ib_eager_bytes);
  o.poll_us = config.ib_poll_us;
  o.peer_timeout_ms = config.rdma_peer_timeout_ms();
  o.pause_above = static_cast<uint64_t>(config.early_pause_bytes);
  o.resume_below = static_cast<uint64_t>(config.early_resume_bytes);
  return o;
}

transport::TcpOptions TcpOptionsFor(const Config& config, const std::string& bind_address) {
  transport::TcpOptions o;
  // auto: epoll, driven by the waiting threads (tcp/engine.h).
  o.engine = config.tcp_engine == TcpEngine::kUring ? transport::EngineKind::kUring : transport::EngineKind::kEpoll;
  o.connect = config.tcp_connect == TcpConnect::kLazy ? transport::ConnectMode::kLazy : transport::ConnectMode::kEager;
  o.connect_timeout_ms = config.connect_timeout_ms;
  o.nsockets = config.nsocks_per_peer;
  o.socket_bufsize = config.socket_bufsize;
  o.stripe_min_bytes = config.stripe_min_bytes;
  o.spin_us = config.spin_us;
  o.bind_address = bind_address;
  o.timeout_ms = config.timeout_ms;
  o.peer_timeout_ms = config.peer_timeout_ms;
  o.early_cache_bytes = config.scratch_cache_bytes;
  o.pause_above = static_cast<uint64_t>(config.early_pause_bytes);
  o.resume_below = static_cast<uint64_t>(config.early_resume_bytes);
  o.secret = config.secret;
  return o;
}

transport::ShmOptions ShmOptionsFor(const Config& config, int rank, int size, std::vector<int> local_ranks,
                                    bool crowded, uint64_t comm_id) {
  transport::ShmOptions o;
  o.rank = rank;
  o.size = size;
  o.local_ranks = std::move(local_ranks);
  o.dir = config.shm_dir;
  o.comm_id = comm_id;
  switch (config.shm_single_copy) {
    case ShmSingleCopy::kAuto: o.single_copy = transport::SingleCopy::kAuto; break;
    case ShmSingleCopy::kOn: o.single_copy = transport::SingleCopy::kOn; break;
    case ShmSingleCopy::kOff: o.single_copy = transport::SingleCopy::kOff; break;
  }
  o.timeout_ms = config.timeout_ms;
  o.peer_timeout_ms = config.peer_timeout_ms;
  o.spin_us = config.spin_us;
  o.early_cache_bytes = config.scratch_cache_bytes;
  o.crowded = crowded;
  return o;
}

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

// Why `group` cannot share memory; none when every rank of it made its segment.
std::optional<std::string> NoShmReason(const std::vector<PeerInfo>& peers, const std::vector<int>& group,
                                       const std::vector<std::string>& offers) {
  for (int r : group) {
    if (offers[r].rfind("ok ", 0) != 0) {
      return "rank " + std::to_string(r) + " (host " + peers[r].hostname +
             ") has no shared-memory segment: " + offers[r];
    }
  }
  return std::nullopt;
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
                                      Deadline deadline, PhaseClock& phases) {
  // 1. Open what the configuration allows: the interface that reaches the master (or
  // CHORUS_SOCKET_IFNAME's) for TCP, and to pick the RoCE GID.
  Result<std::string> addr = rendezvous::SelectInterfaceAddress(config.socket_ifname, master_addr);
  if (!addr.ok()) return addr.status();
  PeerInfo me = PeerInfo::Local(rank);
  if (!config.host_id.empty()) me.host_id = config.host_id;
  me.shm = config.transport == TransportMode::kShm    ? PeerInfo::Shm::kNeed
           : config.transport == TransportMode::kAuto ? PeerInfo::Shm::kWant
                                                      : PeerInfo::Shm::kNo;
  me.cuda_ipc_off = config.cuda_ipc == CudaIpcMode::kOff;
  me.tcp_lanes = config.tcp_lanes;
  std::unique_ptr<transport::RdmaTransport> rdma;
  if (config.transport != TransportMode::kTcp) {
    auto r = transport::RdmaTransport::Open(rank, size, comm_id, RdmaOptionsFor(config, addr.value()));
    if (r.ok()) {
      rdma = std::move(r.value());
      me.rdma_address = rdma->address();
    } else {
      me.rdma_unavailable = r.status().message();
      if (config.transport == TransportMode::kRdma) CHORUS_WARN("rank " << rank << ": " << r.status().message());
    }
  }
  std::unique_ptr<transport::TcpTransport> tcp;
  if (config.transport != TransportMode::kRdma) {
    auto t = transport::TcpTransport::Listen(rank, size, comm_id, TcpOptionsFor(config, addr.value()));
    if (!t.ok()) return t.status();
    tcp = std::move(t.value());
    me.tcp_address = tcp->address();
  }
  phases.Mark("open");

  // 2. Everyone learns what everyone has (a rank that cannot do RDMA still takes part,
  // so that every rank fails with the same clear error instead of a timeout). Over the
  // bootstrap ring: the store carries one key per rank, not every record to every rank.
  Result<std::unique_ptr<rendezvous::BootstrapRing>> ring =
      rendezvous::BootstrapRing::Create(store, prefix, rank, size, addr.value(), comm_id, config.secret, deadline);
  if (!ring.ok()) return ring.status();
  phases.Mark("ring");
  Result<std::vector<std::string>> all = ring.value()->AllGather(me.Serialize(), deadline);
  if (!all.ok()) return all.status();
  phases.Mark("peers");
  TransportSetup out;
  std::vector<std::string> rdma_addrs, hosts;
  std::optional<std::string> without_rdma;  // the first rank without RDMA, and why
  for (int r = 0; r < size; ++r) {
    Result<PeerInfo> info = PeerInfo::Parse(all.value()[r]);
    if (!info.ok()) return info.status().WithContext("peer info of rank " + std::to_string(r));
    out.peers.push_back(info.value());
    rdma_addrs.push_back(info.value().rdma_address);
    hosts.push_back(info.value().hostname);
    if (info.value().rdma_address.empty() && !without_rdma) {
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
  if (!some_group) ring.value()->Close();  // every rank closes: no more exchanges
  std::unique_ptr<transport::ShmTransport> shm;
  std::optional<std::string> shm_why;  // why this rank's host shares no memory
  bool every_host_shm = false;
  if (some_group) {
    std::string offer = "-";
    if (group.size() > 1) {
      const bool crowded = shares.at(out.peers[rank].host_id).crowded();
      auto s = transport::ShmTransport::Create(ShmOptionsFor(config, rank, size, group, crowded, comm_id));
      offer = s.ok() ? "ok " + s.value()->path() : s.status().message();
      if (s.ok()) shm = std::move(s.value());
      phases.Mark("shm-create");
    }
    Result<std::vector<std::string>> offers = ring.value()->AllGather(offer, deadline);
    ring.value()->Close();
    if (!offers.ok()) return offers.status();
    phases.Mark("shm-offers");
    // Every rank reaches the same verdicts from the same offers: which hosts share memory
    // (the cost model's link within hosts must be the same everywhere), and whether a
    // host where some rank asked for shm (CHORUS_TRANSPORT=shm) cannot.
    every_host_shm = true;
    std::optional<std::string> forced_failure;
    for (const std::vector<int>& g : groups) {
      if (g.size() < 2) continue;
      const std::optional<std::string> why = NoShmReason(out.peers, g, offers.value());
      if (!why) continue;
      every_host_shm = false;
      for (int q : g) {
        if (out.peers[q].shm == PeerInfo::Shm::kNeed && !forced_failure) forced_failure = why;
      }
    }
    if (forced_failure) {
      // Every rank fails alike; the store's host waits until all have read the offers.
      (void)rendezvous::Barrier(store, prefix + "shm_failed", rank, size, deadline);
      return Unavailable("rank " + std::to_string(rank) + ": CHORUS_TRANSPORT=shm, but " + *forced_failure);
    }
    if (group.size() > 1) {
      shm_why = NoShmReason(out.peers, group, offers.value());
      if (!shm_why) {
        CHORUS_RETURN_IF_ERROR(ConnectShm(*shm, out.peers, group, offers.value()));
        phases.Mark("shm-connect");
      } else {
        shm.reset();
        if (rank == group[0]) CHORUS_WARN("host " << me.hostname << ": shared memory off, TCP instead: " << *shm_why);
      }
    }
    // Every segment is mapped before any is unlinked.
    CHORUS_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix + "shm_mapped", rank, size, deadline));
    if (shm) CHORUS_RETURN_IF_ERROR(shm->Start());
    phases.Mark("shm-barrier");
  }

  // 4. Between hosts (or where shared memory is off): the same network choice on every
  // rank, then connect it. With one group sharing memory throughout, none is needed.
  const bool need_network = !(groups.size() == 1 && every_host_shm);
  std::unique_ptr<transport::Transport> network;
  std::string network_choice;
  if (!need_network) {
    rdma.reset();
    tcp.reset();
  } else if (!without_rdma && rdma) {
    network_choice = "rdma (every rank has a verbs device)";
    out.intra = out.inter = algos::LinkKind::kRdma;
    CHORUS_RETURN_IF_ERROR(rdma->Connect(rdma_addrs, hosts));
    // Every queue pair must be ready to receive before any rank sends its HELLO.
    CHORUS_RETURN_IF_ERROR(rendezvous::Barrier(store, prefix + "rdma_ready", rank, size, deadline));
    CHORUS_RETURN_IF_ERROR(rdma->Start(deadline));
    network = std::move(rdma);
  } else if (config.transport == TransportMode::kRdma) {
    return Unavailable("rank " + std::to_string(rank) + ": CHORUS_TRANSPORT=rdma, but " +
                       without_rdma.value_or("this rank has no RDMA transport"));
  } else {
    network_choice = config.transport == TransportMode::kTcp
                         ? "tcp (CHORUS_TRANSPORT=tcp)"
                         : "tcp (" + without_rdma.value_or("no RDMA transport") + ")";
    rdma.reset();
    std::vector<transport::PeerAddress> addresses;
    for (const PeerInfo& p : out.peers) {
      const rendezvous::HostShare& h = shares.at(p.host_id);
      const int channels = p.tcp_lanes > 0 ? p.tcp_lanes : transport::AutoChannels(h.cores, h.ranks);
      addresses.push_back({p.tcp_address, p.hostname, channels});
    }
    CHORUS_RETURN_IF_ERROR(tcp->Connect(addresses, deadline));
    network = std::move(tcp);
  }

  if (network) phases.Mark("network");

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
    out.choice = network_choice + (shm_why ? " (no shared memory: " + *shm_why + ")" : "");
  }
  CHORUS_INFO("rank " << rank << ": transport " << out.choice);
  return out;
}

}  // namespace chorus
