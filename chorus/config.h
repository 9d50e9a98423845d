// Configuration read once from the environment (CHORUS_*), overridable per
// communicator through Options. This is the only process-wide state in chorus.
// Every setting's variable, default, allowed values and meaning: the settings table
// in config.cc (README's "Configuration"; `bazel run //chorus:settings_table`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algos/algorithm.h"
#include "common/env.h"
#include "common/job_secret.h"
#include "common/status.h"

namespace chorus {

// The modes, one enum per CHORUS_* variable; ModeName gives each value's name there.
enum class TransportMode { kAuto, kShm, kTcp, kRdma };  // CHORUS_TRANSPORT
enum class ShmSingleCopy { kAuto, kOn, kOff };          // CHORUS_SHM_SINGLE_COPY
enum class CudaIpcMode { kAuto, kAlways, kOff };        // CHORUS_CUDA_IPC
enum class CudaIpcOneGpu { kLeader, kSplit };           // CHORUS_CUDA_IPC_ONE_GPU
// CHORUS_CUDA_IPC_SYNC: flags in device memory that the streams write and wait on, or
// interprocess events.
enum class CudaIpcSync { kFlags, kEvents };
// CHORUS_STAGING_SYNC: copies enqueued at the call waiting on signals in mapped host
// memory, or a one-thread kernel holding the stream.
enum class StagingSync { kSignals, kKernel };
enum class TcpEngine { kAuto, kUring, kEpoll };  // CHORUS_TCP_ENGINE
enum class TcpConnect { kEager, kLazy };         // CHORUS_TCP_CONNECT

const char* ModeName(TransportMode m);
const char* ModeName(ShmSingleCopy m);
const char* ModeName(CudaIpcMode m);
const char* ModeName(CudaIpcOneGpu m);
const char* ModeName(CudaIpcSync m);
const char* ModeName(StagingSync m);
const char* ModeName(TcpEngine m);
const char* ModeName(TcpConnect m);

struct Config {
  int64_t timeout_ms = 30 * 60 * 1000;                      // CHORUS_TIMEOUT
  int64_t connect_timeout_ms = 5 * 60 * 1000;               // CHORUS_CONNECT_TIMEOUT
  TransportMode transport = TransportMode::kAuto;           // CHORUS_TRANSPORT
  std::string host_id;                                      // CHORUS_HOSTID
  std::string shm_dir = "/dev/shm";                         // CHORUS_SHM_DIR
  ShmSingleCopy shm_single_copy = ShmSingleCopy::kAuto;     // CHORUS_SHM_SINGLE_COPY
  std::string ib_hca;                                       // CHORUS_IB_HCA
  int ib_gid_index = -1;                                    // CHORUS_IB_GID_INDEX
  int64_t ib_eager_bytes = 8 << 10;                         // CHORUS_IB_EAGER_BYTES
  int64_t ib_poll_us = 0;                                   // CHORUS_IB_POLL_US
  int64_t spin_us = 100;                                    // CHORUS_SPIN_US
  int64_t peer_timeout_ms = 30 * 1000;                      // CHORUS_PEER_TIMEOUT
  int64_t ib_peer_timeout_ms = 0;                           // CHORUS_IB_PEER_TIMEOUT (0: peer_timeout_ms)
  CudaIpcMode cuda_ipc = CudaIpcMode::kAuto;                // CHORUS_CUDA_IPC
  CudaIpcOneGpu cuda_ipc_one_gpu = CudaIpcOneGpu::kLeader;  // CHORUS_CUDA_IPC_ONE_GPU
  CudaIpcSync cuda_ipc_sync = CudaIpcSync::kFlags;          // CHORUS_CUDA_IPC_SYNC
  StagingSync staging_sync = StagingSync::kSignals;         // CHORUS_STAGING_SYNC
  TcpEngine tcp_engine = TcpEngine::kAuto;                  // CHORUS_TCP_ENGINE
  TcpConnect tcp_connect = TcpConnect::kLazy;               // CHORUS_TCP_CONNECT
  int nsocks_per_peer = 2;                                  // CHORUS_NSOCKS_PERPEER
  int tcp_lanes = 0;                                        // CHORUS_TCP_LANES
  int64_t socket_bufsize = 4 << 20;                         // CHORUS_SOCKET_BUFSIZE
  int64_t stripe_min_bytes = 256 << 10;                     // CHORUS_STRIPE_MIN
  std::string socket_ifname;                                // CHORUS_SOCKET_IFNAME
  std::optional<algos::Algorithm> algo;                     // CHORUS_ALGO; none: the cost model
  int64_t staging_window_bytes = int64_t{64} << 20;         // CHORUS_STAGING_WINDOW
  int64_t chunk_bytes = 512 << 10;                          // CHORUS_CHUNK_BYTES
  int64_t scratch_cache_bytes = int64_t{256} << 20;         // CHORUS_SCRATCH_CACHE
  int64_t early_pause_bytes = int64_t{64} << 20;            // CHORUS_EARLY_PAUSE
  int64_t early_resume_bytes = int64_t{16} << 20;           // CHORUS_EARLY_RESUME
  JobSecret secret;                                         // CHORUS_SECRET or CHORUS_SECRET_FILE's content
  std::string secret_file;                                  // CHORUS_SECRET_FILE

  // CHORUS_IB_PEER_TIMEOUT where set, else CHORUS_PEER_TIMEOUT.
  int64_t rdma_peer_timeout_ms() const { return ib_peer_timeout_ms > 0 ? ib_peer_timeout_ms : peer_timeout_ms; }
  // Reads every CHORUS_* variable; an error names the variable, its bad value and
  // the values allowed.
  static Result<Config> FromEnv(const EnvLookup& env);
  // The process's configuration, read once on first use. A bad variable is reported
  // by the first communicator creation (see ProcessConfigStatus).
  static const Config& Process();
  static const Status& ProcessConfigStatus();
};

// One row of the settings table, as README shows it.
struct SettingRow {
  std::string name;           // CHORUS_...
  std::string type;           // "mode", "bytes", "seconds", ...
  std::string default_value;  // as the variable would spell it, or a description
  std::string allowed;
  std::string meaning;
};
// `shown` fills the default column (its values: the defaults unless given).
std::vector<SettingRow> Settings(const Config& shown = Config());
// The settings table as Markdown, one row per variable.
std::string SettingsMarkdown();

}  // namespace chorus
