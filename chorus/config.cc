#include "chorus/config.h"

#include <cctype>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "common/log.h"

namespace chorus {
namespace {

template <typename E>
struct ModeValue {
  E value;
  const char* name;
};

constexpr ModeValue<TransportMode> kTransportModes[] = {{TransportMode::kAuto, "auto"},
                                                        {TransportMode::kShm, "shm"},
                                                        {TransportMode::kTcp, "tcp"},
                                                        {TransportMode::kRdma, "rdma"}};
constexpr ModeValue<ShmSingleCopy> kShmSingleCopies[] = {
    {ShmSingleCopy::kAuto, "auto"}, {ShmSingleCopy::kOn, "on"}, {ShmSingleCopy::kOff, "off"}};
constexpr ModeValue<CudaIpcMode> kCudaIpcModes[] = {
    {CudaIpcMode::kAuto, "auto"}, {CudaIpcMode::kAlways, "always"}, {CudaIpcMode::kOff, "off"}};
constexpr ModeValue<CudaIpcOneGpu> kCudaIpcOneGpus[] = {{CudaIpcOneGpu::kLeader, "leader"},
                                                        {CudaIpcOneGpu::kSplit, "split"}};
constexpr ModeValue<CudaIpcSync> kCudaIpcSyncs[] = {{CudaIpcSync::kFlags, "flags"}, {CudaIpcSync::kEvents, "events"}};
constexpr ModeValue<StagingSync> kStagingSyncs[] = {{StagingSync::kSignals, "signals"},
                                                    {StagingSync::kKernel, "kernel"}};
constexpr ModeValue<TcpEngine> kTcpEngines[] = {
    {TcpEngine::kAuto, "auto"}, {TcpEngine::kUring, "uring"}, {TcpEngine::kEpoll, "epoll"}};
constexpr ModeValue<TcpConnect> kTcpConnects[] = {{TcpConnect::kEager, "eager"}, {TcpConnect::kLazy, "lazy"}};

// Values renamed; the old names keep working, with a warning once per process.
struct Renamed {
  const char* variable;
  const char* old_name;
  const char* new_name;
};
constexpr Renamed kRenamed[] = {{"CHORUS_CUDA_IPC_SYNC", "words", "flags"}, {"CHORUS_STAGING_SYNC", "gate", "kernel"}};

void WarnRenamedOnce(const Renamed& r) {
  static std::mutex mu;
  static std::set<const Renamed*> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(&r).second) return;
  }
  CHORUS_WARN(r.variable << "=" << r.old_name << " is deprecated: it is now " << r.variable << "=" << r.new_name);
}

template <typename E, size_t N>
const char* NameIn(const ModeValue<E> (&values)[N], E m) {
  for (const ModeValue<E>& v : values) {
    if (v.value == m) return v.name;
  }
  return "unknown";
}

template <typename E, size_t N>
std::string AllowedNames(const char* variable, const ModeValue<E> (&values)[N]) {
  std::string s;
  for (const ModeValue<E>& v : values) s += std::string(s.empty() ? "" : ", ") + "`" + v.name + "`";
  for (const Renamed& r : kRenamed) {
    if (std::string(r.variable) == variable)
      s += std::string("; `") + r.old_name + "` (deprecated) = `" + r.new_name + "`";
  }
  return s;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

template <typename E, size_t N>
Result<E> ParseMode(const char* variable, const std::string& text, const ModeValue<E> (&values)[N]) {
  std::string name = Lower(text);
  for (const Renamed& r : kRenamed) {
    if (std::string(r.variable) == variable && name == r.old_name) {
      WarnRenamedOnce(r);
      name = r.new_name;
    }
  }
  for (const ModeValue<E>& v : values) {
    if (name == v.name) return v.value;
  }
  std::string allowed;
  for (const ModeValue<E>& v : values) allowed += std::string(allowed.empty() ? "" : ", ") + v.name;
  return InvalidArgument(std::string(variable) + "='" + text + "' is not allowed; allowed: " + allowed);
}

// 4096 -> "4K", 8 << 20 -> "8M": the spelling the variables take.
std::string FormatBytes(int64_t b) {
  const char* suffix[] = {"G", "M", "K"};
  const int shift[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    if (b != 0 && b % (int64_t{1} << shift[i]) == 0) return std::to_string(b >> shift[i]) + suffix[i];
  }
  return std::to_string(b);
}

// One CHORUS_* variable: how it reads into Config and how the table shows it.
struct Setting {
  const char* name;
  std::string type;
  std::string allowed;
  std::string meaning;
  std::function<Status(const std::string& value, Config& c)> read;  // empty: not a Config field
  std::function<std::string(const Config& c)> show;                 // the default's spelling
};

template <typename E, size_t N>
Setting Mode(const char* name, E Config::*field, const ModeValue<E> (&values)[N], const char* meaning) {
  return Setting{name,
                 "mode",
                 AllowedNames(name, values),
                 meaning,
                 [name, field, &values](const std::string& v, Config& c) -> Status {
                   Result<E> m = ParseMode(name, v, values);
                   if (!m.ok()) return m.status();
                   c.*field = m.value();
                   return Status::Ok();
                 },
                 [field, &values](const Config& c) { return std::string(NameIn(values, c.*field)); }};
}

// An integer in [min, max]; `scale` converts the variable's unit to the field's
// (seconds to milliseconds). `shown` replaces the default where it means more than a number.
template <typename T>
Setting Int(const char* name, const char* type, T Config::*field, int64_t min, int64_t max, const char* meaning,
            int64_t scale = 1, const char* shown = nullptr) {
  return Setting{name,
                 type,
                 std::to_string(min) + "-" + std::to_string(max),
                 meaning,
                 [name, field, min, max, scale](const std::string& v, Config& c) -> Status {
                   Result<int64_t> n =
                       EnvInt([&](const std::string&) { return std::optional<std::string>(v); }, name, 0, min, max);
                   if (!n.ok()) return n.status();
                   c.*field = static_cast<T>(n.value() * scale);
                   return Status::Ok();
                 },
                 [field, scale, shown](const Config& c) {
                   return shown ? std::string(shown) : std::to_string(static_cast<int64_t>(c.*field) / scale);
                 }};
}

// A size with an optional K/M/G suffix, in [min, max] (max 0: no bound); `zero_too`:
// 0 is allowed below min, meaning "none".
Setting Bytes(const char* name, int64_t Config::*field, int64_t min, int64_t max, bool zero_too, const char* meaning) {
  std::string allowed = zero_too ? "`0` or " : "";
  allowed += max > 0 ? FormatBytes(min) + "-" + FormatBytes(max) : "at least " + FormatBytes(min);
  allowed += " (bytes; K, M, G suffixes)";
  return Setting{name,
                 "bytes",
                 allowed,
                 meaning,
                 [name, field, min, max, zero_too](const std::string& v, Config& c) -> Status {
                   Result<int64_t> b = ParseByteSize(name, v);
                   if (!b.ok()) return b.status();
                   const int64_t n = b.value();
                   if (!(zero_too && n == 0) && (n < min || (max > 0 && n > max))) {
                     std::string range = max > 0 ? FormatBytes(min) + " and " + FormatBytes(max) : "";
                     return InvalidArgument(std::string(name) + "='" + v + "' must be " + (zero_too ? "0 or " : "") +
                                            (max > 0 ? "between " + range : "at least " + FormatBytes(min)));
                   }
                   c.*field = n;
                   return Status::Ok();
                 },
                 [field](const Config& c) { return FormatBytes(c.*field); }};
}

Setting Text(const char* name, std::string Config::*field, const char* shown, const char* allowed,
             const char* meaning) {
  return Setting{name,
                 "text",
                 allowed,
                 meaning,
                 [field](const std::string& v, Config& c) {
                   c.*field = v;
                   return Status::Ok();
                 },
                 [field, shown](const Config& c) { return (c.*field).empty() ? std::string(shown) : c.*field; }};
}

// The settings table: the parser reads it, Settings() prints it (README). One line of
// meaning each; the how and why are in docs/ARCHITECTURE.md and docs/design/.
const std::vector<Setting>& Table() {
  static const std::vector<Setting> table = [] {
    std::vector<Setting> t;
    t.push_back(Setting{"CHORUS_DEBUG", "mode", "`WARN`, `INFO`, `TRACE`",
                        "log level: `INFO` adds set-up and algorithm choices, `TRACE` every call (read by the log, "
                        "not per communicator)",
                        nullptr, [](const Config&) { return std::string("WARN"); }});
    t.push_back(Int("CHORUS_TIMEOUT", "seconds", &Config::timeout_ms, 1, 7 * 24 * 3600,
                    "deadline of every blocking wait; a dead peer becomes an error naming it", 1000));
    t.push_back(Int("CHORUS_CONNECT_TIMEOUT", "seconds", &Config::connect_timeout_ms, 1, 24 * 3600,
                    "deadline of rendezvous and connection set-up", 1000));
    // The secret's value is never shown: the table prints only whether one is set.
    t.push_back(Setting{
        "CHORUS_SECRET", "text", "any text (never printed or logged)",
        "the job secret: the store and every TCP connection admit only processes that prove they "
        "know it (docs/design/job_secret.md); `chorusrun` makes one for a one-node job when none is set; none: any "
        "process that reaches the store can join",
        [](const std::string& v, Config& c) -> Status {
          if (v.empty()) return InvalidArgument("CHORUS_SECRET is set but empty");
          c.secret = JobSecret(v);
          return Status::Ok();
        },
        [](const Config& c) { return std::string(c.secret.empty() ? "(none)" : "(set)"); }});
    t.push_back(Text("CHORUS_SECRET_FILE", &Config::secret_file, "(none)",
                     "a file only its owner may read (mode 600 or stricter)",
                     "read the job secret from this file instead (one trailing newline dropped)"));
    t.push_back(Int("CHORUS_PEER_TIMEOUT", "seconds", &Config::peer_timeout_ms, 1, 24 * 3600,
                    "a TCP or RDMA peer that requests wait on and that sends nothing this long, even to a PING, "
                    "fails the communicator naming it (a shared-memory peer: one stopped this long); TCP's kernel "
                    "also gives up on a connection whose data or keepalive probes stay unacknowledged this long",
                    1000));
    t.push_back(Mode("CHORUS_TRANSPORT", &Config::transport, kTransportModes,
                     "`auto`: shared memory within a host, between hosts RDMA where every rank has a verbs device, "
                     "else TCP; `shm`: as auto, but an error where ranks of one host cannot share memory; `tcp`, "
                     "`rdma`: that transport between every pair"));
    t.push_back(Text("CHORUS_HOSTID", &Config::host_id, "(hostname, boot id, network namespace)", "any text",
                     "this host's identity (as `NCCL_HOSTID`): ranks with equal ones share a host"));
    t.push_back(Text("CHORUS_SHM_DIR", &Config::shm_dir, "", "a directory",
                     "where shared-memory segments are made, each unlinked once every local peer mapped it; one "
                     "too small for the rings falls back to TCP, saying so"));
    t.push_back(Mode("CHORUS_SHM_SINGLE_COPY", &Config::shm_single_copy, kShmSingleCopies,
                     "large shared-memory messages read straight from the sender (`process_vm_readv`; from 512 "
                     "KiB the waiting sender writes part of it, `process_vm_writev`) instead of "
                     "copied through a ring twice: `auto` wherever the sender's process allows it and the "
                     "host has a core per rank, `on` wherever allowed, `off` never"));
    t.push_back(Text("CHORUS_IB_HCA", &Config::ib_hca, "(first active port)", "`mlx5_0` or `mlx5_0:1`",
                     "RDMA device and port"));
    t.push_back(Int("CHORUS_IB_GID_INDEX", "integer", &Config::ib_gid_index, -1, 1 << 16,
                    "RDMA GID index; -1: the RoCE v2 GID of the interface that reaches the master", 1, "-1"));
    t.push_back(Int("CHORUS_IB_PEER_TIMEOUT", "seconds", &Config::ib_peer_timeout_ms, 1, 24 * 3600,
                    "`CHORUS_PEER_TIMEOUT` for RDMA peers only", 1000, "(`CHORUS_PEER_TIMEOUT`)"));
    t.push_back(Int("CHORUS_IB_POLL_US", "microseconds", &Config::ib_poll_us, 0, 1000000,
                    "the RDMA engine polls its completion queue this long before it sleeps (0: no spinning)"));
    t.push_back(Int("CHORUS_SPIN_US", "microseconds", &Config::spin_us, 0, 1000000,
                    "after activity a thread waiting for TCP, the TCP engine, the executor of I-calls and a thread "
                    "waiting on their Work poll this long, yielding the CPU, before they sleep (0: sleep at once)"));
    t.push_back(Bytes("CHORUS_IB_EAGER_BYTES", &Config::ib_eager_bytes, 0, 1 << 20, false,
                      "RDMA messages up to this size travel inside control messages"));
    t.push_back(Mode("CHORUS_TCP_ENGINE", &Config::tcp_engine, kTcpEngines,
                     "`auto` = `epoll`, driven by the threads that wait (lowest latency); `uring`: io_uring with "
                     "its own engine thread"));
    t.push_back(Mode("CHORUS_TCP_CONNECT", &Config::tcp_connect, kTcpConnects,
                     "`lazy`: a pair connects the first time a call needs it, within `CHORUS_CONNECT_TIMEOUT` "
                     "(sockets only to the peers the algorithms talk to: 2 for a ring, log2 n for recursive "
                     "doubling); `eager`: every pair of ranks connects at set-up (a full mesh); every rank must "
                     "agree"));
    t.push_back(Int("CHORUS_NSOCKS_PERPEER", "integer", &Config::nsocks_per_peer, 1, 64,
                    "TCP sockets per peer and channel; large messages are striped over them"));
    t.push_back(Int("CHORUS_TCP_LANES", "integer", &Config::tcp_lanes, 0, 8,
                    "TCP channels, each an engine thread with its own sockets, large messages cut across them; 0: a "
                    "channel per core of each rank of the host, at most 8; the ranks use the fewest any asks for"));
    t.push_back(Text("CHORUS_SOCKET_IFNAME", &Config::socket_ifname, "(route to master)",
                     "`eth0`, `eth` (prefix), `=eth0` (exact), `^docker,lo` (exclude)",
                     "the interfaces TCP may use, and the address in an NCCL unique id, as `NCCL_SOCKET_IFNAME`"));
    t.push_back(Bytes("CHORUS_SOCKET_BUFSIZE", &Config::socket_bufsize, 0, 0, false,
                      "socket send and receive buffer size (0: the kernel's default)"));
    t.push_back(Bytes("CHORUS_STRIPE_MIN", &Config::stripe_min_bytes, 0, 0, false,
                      "messages above this are striped across the sockets of a peer"));
    t.push_back(Mode("CHORUS_CUDA_IPC", &Config::cuda_ipc, kCudaIpcModes,
                     "device-buffer calls of ranks on one host: `auto` through CUDA IPC, except small calls of "
                     "ranks that share a GPU without MPS and order streams with events (staged); `always`: CUDA "
                     "IPC at every size; `off`: staged through host memory and the transport"));
    t.push_back(Mode("CHORUS_CUDA_IPC_SYNC", &Config::cuda_ipc_sync, kCudaIpcSyncs,
                     "how the ranks' streams order each other in a call through CUDA IPC: `flags` (each stream "
                     "writes flags in its device memory that the peers' streams wait on) or `events` "
                     "(interprocess events); `events` on any rank, or a driver without stream memory operations, "
                     "makes every rank use events"));
    t.push_back(
        Bytes("CHORUS_STAGING_WINDOW", &Config::staging_window_bytes, 4096, 0, true,
              "all_reduce, broadcast and reduce above this run as consecutive calls of at most this size, "
              "so device buffers staged through host memory need pinned bounce buffers this small; 0: no windows"));
    t.push_back(Mode("CHORUS_STAGING_SYNC", &Config::staging_sync, kStagingSyncs,
                     "how a staged stream-form call holds the caller's stream: `signals` (every copy enqueued at "
                     "the call, waiting on signals in mapped host memory that the staging task writes) or `kernel` "
                     "(a one-thread kernel holds the stream while the task copies); `signals` falls back to "
                     "`kernel`, saying so, where the driver has no stream memory operations"));
    t.push_back(Mode("CHORUS_CUDA_IPC_ONE_GPU", &Config::cuda_ipc_one_gpu, kCudaIpcOneGpus,
                     "all_reduce through CUDA IPC of ranks that all use one GPU: `leader` (rank 0 reduces every "
                     "input into every output in one pass) or `split` (each rank reduces its slice, as across "
                     "GPUs); `split` on any rank makes every rank split"));
    t.push_back(Setting{"CHORUS_ALGO", "algorithm", algos::ForceableAlgorithmNames(),
                        "force an algorithm where it applies; `Communicator::Explain` prints every candidate's "
                        "predicted time",
                        [](const std::string& v, Config& c) -> Status {
                          Result<algos::Algorithm> a = algos::ParseAlgorithm(v);
                          if (!a.ok()) return a.status();
                          c.algo = a.value();
                          return Status::Ok();
                        },
                        [](const Config& c) {
                          return c.algo ? std::string(algos::AlgorithmName(*c.algo)) : std::string("(cost model)");
                        }});
    t.push_back(
        Bytes("CHORUS_CHUNK_BYTES", &Config::chunk_bytes, 4096, 0, false, "pipelining chunk of the collectives"));
    t.push_back(Bytes("CHORUS_SCRATCH_CACHE", &Config::scratch_cache_bytes, 0, 0, false,
                      "scratch kept per communicator for the next call (the algorithms', and as much again for "
                      "TCP's copies of early messages); 0: allocate every time"));
    t.push_back(Bytes("CHORUS_EARLY_PAUSE", &Config::early_pause_bytes, 0, 0, false,
                      "a receiver holding more than this of one peer's early messages (sent before their receive "
                      "was posted) tells that peer to pause: send only what a posted receive asked for"));
    t.push_back(Bytes("CHORUS_EARLY_RESUME", &Config::early_resume_bytes, 0, 0, false,
                      "... until it holds less than this (at most `CHORUS_EARLY_PAUSE`)"));
    return t;
  }();
  return table;
}

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

std::string Cell(std::string s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

const char* ModeName(TransportMode m) { return NameIn(kTransportModes, m); }
const char* ModeName(ShmSingleCopy m) { return NameIn(kShmSingleCopies, m); }
const char* ModeName(CudaIpcMode m) { return NameIn(kCudaIpcModes, m); }
const char* ModeName(CudaIpcOneGpu m) { return NameIn(kCudaIpcOneGpus, m); }
const char* ModeName(CudaIpcSync m) { return NameIn(kCudaIpcSyncs, m); }
const char* ModeName(StagingSync m) { return NameIn(kStagingSyncs, m); }
const char* ModeName(TcpEngine m) { return NameIn(kTcpEngines, m); }
const char* ModeName(TcpConnect m) { return NameIn(kTcpConnects, m); }

Result<Config> Config::FromEnv(const EnvLookup& env) {
  Config c;
  for (const Setting& s : Table()) {
    if (!s.read) continue;
    if (std::optional<std::string> v = env(s.name)) CHORUS_RETURN_IF_ERROR(s.read(*v, c));
  }
  if (!c.secret_file.empty()) {
    if (!c.secret.empty()) {
      return InvalidArgument("both CHORUS_SECRET and CHORUS_SECRET_FILE=" + c.secret_file +
                             " are set; set one of them");
    }
    Result<JobSecret> s = ReadSecretFile(c.secret_file);
    if (!s.ok()) return s.status();
    c.secret = std::move(s.value());
  }
  if (c.early_resume_bytes > c.early_pause_bytes) {
    return InvalidArgument("CHORUS_EARLY_RESUME (" + FormatBytes(c.early_resume_bytes) +
                           ") must not be above CHORUS_EARLY_PAUSE (" + FormatBytes(c.early_pause_bytes) + ")");
  }
  return c;
}

const Config& Config::Process() { return LoadOnce().config; }
const Status& Config::ProcessConfigStatus() { return LoadOnce().status; }

std::vector<SettingRow> Settings(const Config& shown) {
  std::vector<SettingRow> rows;
  for (const Setting& s : Table()) rows.push_back({s.name, s.type, s.show(shown), s.allowed, s.meaning});
  return rows;
}

std::string SettingsMarkdown() {
  std::ostringstream os;
  os << "| Variable | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|\n";
  for (const SettingRow& r : Settings()) {
    const std::string def = r.default_value.rfind('(', 0) == 0 ? r.default_value : "`" + r.default_value + "`";
    os << "| `" << r.name << "` | " << r.type << " | " << Cell(def) << " | " << Cell(r.allowed) << " | "
       << Cell(r.meaning) << " |\n";
  }
  return os.str();
}

}  // namespace chorus
