// The first collective of every communicator, run through the store: an all-gather
// of each rank's identity and address, and a counter-based barrier. Both name the
// ranks that never arrived when their deadline passes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "rendezvous/store.h"

namespace chorus::rendezvous {

// Every rank sets `prefix/rank` to `mine` and gets everyone's value, indexed by rank.
// A timeout error lists the ranks that never arrived ("ranks 2, 3 of 4 never arrived
// within 30 s"). A prefix must be used for one all-gather only.
Result<std::vector<std::string>> AllGather(Store& store, const std::string& prefix, int rank, int size,
                                           const std::string& mine, Deadline deadline);

// Returns once all `size` ranks called Barrier with this prefix. Counter based, so a
// prefix can be reused for successive barriers; the last rank to arrive releases the
// others with one key. A timeout error lists the ranks that never arrived.
Status Barrier(Store& store, const std::string& prefix, int rank, int size, Deadline deadline);

// What each rank tells the others about itself.
struct PeerInfo {
  int rank = -1;
  std::string hostname;
  // Equal for ranks on one host (hostname, kernel boot id and network namespace, or
  // CHORUS_HOSTID): decides who is "local".
  std::string host_id;
  // The pid namespace: ranks of one host share memory only within one (they read each
  // other's memory and watch each other's processes by pid).
  std::string pid_ns;
  enum class Shm { kNo = 0, kWant = 1, kNeed = 2 };
  Shm shm = Shm::kNo;  // CHORUS_TRANSPORT here: tcp/rdma, auto, shm
  int pid = 0;
  std::string tcp_address;              // "ip:port" the transport listens on
  std::string rdma_address;             // queue-pair addresses; empty: no usable verbs device
  std::string rdma_unavailable;         // why there is none (for "CHORUS_TRANSPORT=rdma" errors)
  std::vector<std::string> interfaces;  // "name=ip", IPv4 interfaces that are up
  bool cuda_ipc_off = false;            // CHORUS_CUDA_IPC=off here: no rank uses CUDA IPC
  int cores = 0;                        // online CPUs of this host (0: not known)
  // The kernel's boot id: hosts with equal ones (network namespaces, containers) are one
  // machine and share its cores. "": not known.
  std::string machine;
  int tcp_lanes = 0;  // CHORUS_TCP_LANES here (0: automatic)

  // A versioned, line-based "key=value" text; values are %-escaped.
  std::string Serialize() const;
  // Errors (not crashes) on anything that is not a well-formed version 1 record.
  static Result<PeerInfo> Parse(const std::string& text);
  // This process: hostname, host_id, pid, interfaces (tcp_address left empty).
  static PeerInfo Local(int rank);
};

// Per host (host_id): how many ranks it runs and its cores (the most any of its ranks
// reported; 0: not known), and how many ranks run on the machine it is part of (every
// host of the same machine: they share those cores; its own where not known).
struct HostShare {
  int ranks = 0;
  int cores = 0;
  int machine_ranks = 0;
  // Its machine runs more ranks than it has cores.
  bool crowded() const { return cores > 0 && machine_ranks > cores; }
};
std::map<std::string, HostShare> HostShares(const std::vector<PeerInfo>& peers);

// "2, 3" / "2-5, 9": rank lists in messages.
std::string FormatRankList(const std::vector<int>& ranks);

}  // namespace chorus::rendezvous
