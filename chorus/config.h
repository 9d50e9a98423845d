// Configuration read once from the environment (CHORUS_*), overridable per
// communicator through Options. This is the only process-wide state in chorus.
#pragma once

#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/status.h"

namespace chorus {

struct Config {
  // Deadline for every blocking wait (CHORUS_TIMEOUT, seconds; torch's default 30 min).
  int64_t timeout_ms = 30 * 60 * 1000;
  // Deadline for rendezvous and connection set-up (CHORUS_CONNECT_TIMEOUT, seconds).
  int64_t connect_timeout_ms = 5 * 60 * 1000;
  // Transport between ranks (CHORUS_TRANSPORT): "auto" (shared memory between the
  // ranks of one host, and between hosts RDMA when every rank has a verbs device, else
  // TCP), "shm" (as auto, but an error where ranks of one host cannot share memory),
  // "tcp" (TCP between every pair, the ranks of one host too), "rdma" (RDMA between
  // every pair; an error naming the ranks without a verbs device).
  std::string transport = "auto";
  // This host's identity (CHORUS_HOSTID, as NCCL_HOSTID): ranks with equal identities
  // are on one host. Empty: hostname, kernel boot id and network namespace.
  std::string host_id;
  // Where shared-memory segments are created (CHORUS_SHM_DIR); each is unlinked once
  // every local peer mapped it.
  std::string shm_dir = "/dev/shm";
  // Large shared-memory messages are read straight from the sender's memory
  // (process_vm_readv) instead of copied through a ring twice (CHORUS_SHM_SINGLE_COPY):
  // "auto" (where the kernel allows it and a probe at set-up finds it faster), "on"
  // (wherever allowed), "off".
  std::string shm_single_copy = "auto";
  // RDMA device and port (CHORUS_IB_HCA, "mlx5_0" or "mlx5_0:1"; empty: automatic) and
  // GID index (CHORUS_IB_GID_INDEX; -1: the RoCE v2 GID of the interface in use).
  std::string ib_hca;
  int ib_gid_index = -1;
  // RDMA messages up to this size travel inside control messages (CHORUS_IB_EAGER_BYTES).
  int64_t ib_eager_bytes = 8 << 10;
  // The RDMA engine polls its completion queue this long before it sleeps
  // (CHORUS_IB_POLL_US, microseconds; 0: sleep at once, no spinning).
  int64_t ib_poll_us = 0;
  // Latency: after activity (bytes moved, a request posted or finished) the TCP engine
  // keeps polling (yielding the CPU between polls) this long before it sleeps, and a
  // thread waiting for a TCP send or receive polls this long after it began waiting or
  // bytes last moved (CHORUS_SPIN_US, microseconds; 0: sleep at once). So do the
  // executor of I-calls, for its next call, and a thread waiting on an I-call's Work.
  // RDMA waits do not spin (see CHORUS_IB_POLL_US for its engine).
  int64_t spin_us = 100;
  // An RDMA peer that a request waits for and that stays silent this long, even to a
  // PING, fails the communicator naming it (CHORUS_IB_PEER_TIMEOUT, seconds).
  int64_t ib_peer_timeout_ms = 10 * 1000;
  // CUDA-stream calls on device buffers when every rank is on this host (CHORUS_CUDA_IPC):
  // "auto" (through CUDA IPC where every rank can map its peers' memory, except small
  // calls of ranks that share a GPU without MPS: those are staged, see
  // algos::kTimeSlicedStagedMaxBytes), "always" (through CUDA IPC at every size) or
  // "off" (staged through host memory and the transport, like ranks on different hosts).
  std::string cuda_ipc = "auto";
  // all_reduce through CUDA IPC of ranks that all use one GPU (CHORUS_CUDA_IPC_ONE_GPU):
  // "leader" (rank 0 reduces every input into every output in one pass) or "split"
  // (each rank reduces its slice, then copies the others', as across GPUs). "split" on
  // any rank makes every rank split.
  std::string cuda_ipc_one_gpu = "leader";
  // How the ranks' streams order each other in a call through CUDA IPC
  // (CHORUS_CUDA_IPC_SYNC): "words" (each stream writes words of its device memory that
  // the peers' streams wait on: a cheap handover where ranks take turns on one GPU) or
  // "events" (interprocess events: a whole time slice there). "events" on any rank, or a driver
  // without stream memory operations, makes every rank use events. See algos/cuda_ipc_sync.h.
  std::string cuda_ipc_sync = "words";
  // How a staged stream-form call (device buffers across hosts) holds the caller's
  // stream until its results are on the host side (CHORUS_STAGING_SYNC): "signals"
  // (every copy is enqueued at the call, each waiting on a word in mapped host memory
  // that the task, making no CUDA call, writes: see device_calls.h) or "gate" (a
  // one-thread kernel waits for the staging task, which does the copies). "signals"
  // falls back to "gate", saying so, where the driver has no stream memory operations.
  std::string staging_sync = "signals";
  // TCP engine: "auto" (= epoll with application progress), "uring", "epoll".
  std::string tcp_engine = "auto";
  // Sockets per peer (CHORUS_NSOCKS_PERPEER), messages are striped over them.
  int nsocks_per_peer = 2;
  // TCP lanes (CHORUS_TCP_LANES, 1-8; 0: a lane per core of each rank of a host, at
  // most 8): each its own engine thread and sockets; large messages are cut across
  // them (tcp_transport.h). The ranks use the fewest any of them asks for.
  int tcp_lanes = 0;
  // Socket send/receive buffer size (CHORUS_SOCKET_BUFSIZE, bytes, K/M suffix; 0 = kernel default).
  int64_t socket_bufsize = 4 << 20;
  // Messages above this are striped across the sockets of a peer (CHORUS_STRIPE_MIN).
  int64_t stripe_min_bytes = 256 << 10;
  // Interface filter like NCCL_SOCKET_IFNAME: "eth0", "eth" (prefix), "=eth0" (exact),
  // "^docker,lo" (exclude). Empty: the interface that reaches the master address.
  std::string socket_ifname;
  // Force an algorithm where it applies (CHORUS_ALGO: ring, recursive_doubling, tree, ...).
  std::string algo;
  // Device buffers staged through host memory: all_reduce, broadcast and reduce run in
  // windows of at most this many bytes, one after the other, so the pinned host
  // stand-ins stay this small whatever the call's size (CHORUS_STAGING_WINDOW; 0: one
  // window, as large as the call). The other collectives stage whole.
  int64_t staging_window_bytes = int64_t{64} << 20;
  // Pipelining chunk of the collectives (CHORUS_CHUNK_BYTES).
  int64_t chunk_bytes = 512 << 10;
  // Scratch memory kept for reuse per communicator (CHORUS_SCRATCH_CACHE, bytes): up to
  // this much of the algorithms' scratch, and as much again of the TCP transport's
  // copies of messages that arrived before their receive. 0: every call allocates.
  int64_t scratch_cache_bytes = int64_t{256} << 20;
  // Flow control of early messages (sent before their receive was posted), both
  // transports: a receiver holding more than early_pause_bytes of one peer's tells it
  // to PAUSE (send only what a posted receive asked for) until it holds less than
  // early_resume_bytes (CHORUS_EARLY_PAUSE, CHORUS_EARLY_RESUME, bytes).
  int64_t early_pause_bytes = int64_t{64} << 20;
  int64_t early_resume_bytes = int64_t{16} << 20;

  // Reads every CHORUS_* variable; an error names the variable and its bad value.
  static Result<Config> FromEnv(const EnvLookup& env);
  // The process's configuration, read once on first use. A bad variable is reported
  // by the first communicator creation (see ProcessConfigStatus).
  static const Config& Process();
  static const Status& ProcessConfigStatus();
};

}  // namespace chorus
