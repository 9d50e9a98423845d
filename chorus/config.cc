#include "chorus/config.h"

namespace chorus {
namespace {

struct Loaded {
  Config config;
  Status status;
};

const Loaded& LoadOnce() {
  static const Loaded loaded = [] {
    Loaded l;
    Result<Config> r = Config::FromEnv(ProcessEnv());
    if (r.ok()) l.config = r.value();
    l.status = r.status();
    return l;
  }();
  return loaded;
}

}  // namespace

Result<Config> Config::FromEnv(const EnvLookup& env) {
  Config c;
  Result<int64_t> timeout = EnvInt(env, "CHORUS_TIMEOUT", c.timeout_ms / 1000, 1, 7 * 24 * 3600);
  if (!timeout.ok()) return timeout.status();
  c.timeout_ms = timeout.value() * 1000;
  Result<int64_t> ctimeout = EnvInt(env, "CHORUS_CONNECT_TIMEOUT", c.connect_timeout_ms / 1000, 1, 24 * 3600);
  if (!ctimeout.ok()) return ctimeout.status();
  c.connect_timeout_ms = ctimeout.value() * 1000;
  Result<std::string> engine = EnvChoice(env, "CHORUS_TCP_ENGINE", c.tcp_engine, {"auto", "uring", "epoll"});
  if (!engine.ok()) return engine.status();
  c.tcp_engine = engine.value();
  Result<std::string> transport = EnvChoice(env, "CHORUS_TRANSPORT", c.transport, {"auto", "shm", "tcp", "rdma"});
  if (!transport.ok()) return transport.status();
  c.transport = transport.value();
  if (auto v = env("CHORUS_HOSTID")) c.host_id = *v;
  if (auto v = env("CHORUS_SHM_DIR")) c.shm_dir = *v;
  Result<std::string> single = EnvChoice(env, "CHORUS_SHM_SINGLE_COPY", c.shm_single_copy, {"auto", "on", "off"});
  if (!single.ok()) return single.status();
  c.shm_single_copy = single.value();
  Result<std::string> ipc = EnvChoice(env, "CHORUS_CUDA_IPC", c.cuda_ipc, {"auto", "off", "always"});
  if (!ipc.ok()) return ipc.status();
  c.cuda_ipc = ipc.value();
  Result<std::string> one_gpu = EnvChoice(env, "CHORUS_CUDA_IPC_ONE_GPU", c.cuda_ipc_one_gpu, {"leader", "split"});
  if (!one_gpu.ok()) return one_gpu.status();
  c.cuda_ipc_one_gpu = one_gpu.value();
  Result<std::string> ipc_sync = EnvChoice(env, "CHORUS_CUDA_IPC_SYNC", c.cuda_ipc_sync, {"words", "events"});
  if (!ipc_sync.ok()) return ipc_sync.status();
  c.cuda_ipc_sync = ipc_sync.value();
  Result<std::string> sync = EnvChoice(env, "CHORUS_STAGING_SYNC", c.staging_sync, {"gate", "signals"});
  if (!sync.ok()) return sync.status();
  c.staging_sync = sync.value();
  if (auto v = env("CHORUS_IB_HCA")) c.ib_hca = *v;
  Result<int64_t> gid = EnvInt(env, "CHORUS_IB_GID_INDEX", c.ib_gid_index, -1, 1 << 16);
  if (!gid.ok()) return gid.status();
  c.ib_gid_index = static_cast<int>(gid.value());
  Result<int64_t> poll = EnvInt(env, "CHORUS_IB_POLL_US", c.ib_poll_us, 0, 1000000);
  if (!poll.ok()) return poll.status();
  c.ib_poll_us = poll.value();
  Result<int64_t> spin = EnvInt(env, "CHORUS_SPIN_US", c.spin_us, 0, 1000000);
  if (!spin.ok()) return spin.status();
  c.spin_us = spin.value();
  Result<int64_t> peer_timeout = EnvInt(env, "CHORUS_IB_PEER_TIMEOUT", c.ib_peer_timeout_ms / 1000, 1, 24 * 3600);
  if (!peer_timeout.ok()) return peer_timeout.status();
  c.ib_peer_timeout_ms = peer_timeout.value() * 1000;
  Result<int64_t> nsocks = EnvInt(env, "CHORUS_NSOCKS_PERPEER", c.nsocks_per_peer, 1, 64);
  if (!nsocks.ok()) return nsocks.status();
  c.nsocks_per_peer = static_cast<int>(nsocks.value());
  Result<int64_t> lanes = EnvInt(env, "CHORUS_TCP_LANES", c.tcp_lanes, 0, 8);
  if (!lanes.ok()) return lanes.status();
  c.tcp_lanes = static_cast<int>(lanes.value());
  if (auto v = env("CHORUS_SOCKET_IFNAME")) c.socket_ifname = *v;
  if (auto v = env("CHORUS_ALGO")) c.algo = *v;
  for (auto [name, field] : {std::pair<const char*, int64_t*>{"CHORUS_CHUNK_BYTES", &c.chunk_bytes},
                             {"CHORUS_STAGING_WINDOW", &c.staging_window_bytes},
                             {"CHORUS_SOCKET_BUFSIZE", &c.socket_bufsize},
                             {"CHORUS_STRIPE_MIN", &c.stripe_min_bytes},
                             {"CHORUS_IB_EAGER_BYTES", &c.ib_eager_bytes},
                             {"CHORUS_SCRATCH_CACHE", &c.scratch_cache_bytes},
                             {"CHORUS_EARLY_PAUSE", &c.early_pause_bytes},
                             {"CHORUS_EARLY_RESUME", &c.early_resume_bytes}}) {
    if (auto v = env(name)) {
      Result<int64_t> b = ParseByteSize(name, *v);
      if (!b.ok()) return b.status();
      *field = b.value();
    }
  }
  if (c.chunk_bytes < 4096) return InvalidArgument("CHORUS_CHUNK_BYTES must be at least 4K");
  if (c.staging_window_bytes != 0 && c.staging_window_bytes < 4096) {
    return InvalidArgument("CHORUS_STAGING_WINDOW must be 0 (no windows) or at least 4K");
  }
  if (c.ib_eager_bytes < 0 || c.ib_eager_bytes > (1 << 20)) {
    return InvalidArgument("CHORUS_IB_EAGER_BYTES must be between 0 and 1M");
  }
  if (c.early_resume_bytes > c.early_pause_bytes) {
    return InvalidArgument("CHORUS_EARLY_RESUME (" + std::to_string(c.early_resume_bytes) +
                           ") must not be above CHORUS_EARLY_PAUSE (" + std::to_string(c.early_pause_bytes) + ")");
  }
  return c;
}

const Config& Config::Process() { return LoadOnce().config; }
const Status& Config::ProcessConfigStatus() { return LoadOnce().status; }

}  // namespace chorus
