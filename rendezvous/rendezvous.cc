#include "rendezvous/rendezvous.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "rendezvous/net_util.h"
#include "rendezvous/socket_io.h"

namespace chorus::rendezvous {
namespace {

constexpr const char* kFileHeader = "chorus-store 1";
constexpr const char* kNonceKey = "chorus/rdv/file/nonce";
constexpr const char* kWorldKey = "chorus/rdv/file/world_size";

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

struct FileRecord {
  std::string host;
  uint16_t port = 0;
  std::string nonce;
  int world_size = 0;
  std::string writer;  // "host pid N" for messages
};

std::string FormatRecord(const FileRecord& r) {
  std::ostringstream os;
  os << kFileHeader << "\nhost=" << r.host << "\nport=" << r.port << "\nnonce=" << r.nonce
     << "\nworld_size=" << r.world_size << "\nwriter=" << r.writer << "\n";
  return os.str();
}

Result<FileRecord> ParseRecord(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kFileHeader) {
    return ProtocolError("rendezvous file " + path + " does not start with '" + kFileHeader + "'");
  }
  FileRecord r;
  bool has_port = false, has_world = false;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") r.host = value;
    if (key == "nonce") r.nonce = value;
    if (key == "writer") r.writer = value;
    if (key == "port") {
      Result<int64_t> p = EnvInt(MapEnv({{"port", value}}), "port", -1, 1, 65535);
      if (!p.ok()) return ProtocolError("rendezvous file " + path + " has a bad port '" + value + "'");
      r.port = static_cast<uint16_t>(p.value());
      has_port = true;
    }
    if (key == "world_size") {
      Result<int64_t> w = EnvInt(MapEnv({{"world_size", value}}), "world_size", -1, 1, 1 << 24);
      if (!w.ok()) return ProtocolError("rendezvous file " + path + " has a bad world_size '" + value + "'");
      r.world_size = static_cast<int>(w.value());
      has_world = true;
    }
  }
  if (r.host.empty() || !has_port || r.nonce.empty() || !has_world) {
    return ProtocolError("rendezvous file " + path + " is incomplete (needs host, port, nonce, world_size)");
  }
  return r;
}

// Writes `content` to `path` atomically: readers see the old file or the new one.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + RandomHex();
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return IoError("cannot create rendezvous file " + tmp, errno);
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return IoError("cannot write rendezvous file " + tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return IoError("cannot rename " + tmp + " to rendezvous file " + path, err);
  }
  return Status::Ok();
}

std::string RankKey(const std::string& nonce, int rank) {
  return "chorus/rdv/file/" + nonce + "/rank/" + std::to_string(rank);
}

// Claims this rank's slot in a store found through the file: an error when another
// process (an earlier run's, or a duplicate rank) holds it.
Status ClaimRank(StoreClient& client, const std::string& nonce, int rank, const std::string& path) {
  const std::string me = HostName() + " pid " + std::to_string(getpid()) + " " + RandomHex();
  Result<std::string> held = client.CompareSet(RankKey(nonce, rank), "", me);
  if (!held.ok()) return held.status();
  if (held.value() != me) {
    return MismatchError("rank " + std::to_string(rank) + " was already claimed in the store named by " + path +
                         " (by " + held.value() + "): the file is from another run, or two processes have rank " +
                         std::to_string(rank));
  }
  return Status::Ok();
}

Result<Rendezvous> JoinTcp(const InitSpec& spec, Deadline deadline) {
  Rendezvous rdv;
  const std::string where = JoinHostPort(spec.master_addr, spec.master_port);
  if (spec.rank == 0) {
    const std::string bind = StoreBindAddress(spec.master_addr, ListInterfaces());
    Result<std::unique_ptr<StoreServer>> server = StoreServer::Start(bind, spec.master_port, spec.secret);
    if (server.ok()) {
      rdv.server = std::move(server.value());
    } else if (server.status().code() == StatusCode::kUnavailable) {
      CHORUS_INFO("rank 0: port " << spec.master_port << " is taken; assuming an external store listens at " << where);
    } else {
      return server.status().WithContext("rank 0 starting the store for " + spec.method + "://");
    }
  }
  Result<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(spec.master_addr, spec.master_port, deadline, spec.secret);
  if (!client.ok()) {
    return client.status().WithContext("rank " + std::to_string(spec.rank) + " joining " + spec.method +
                                       ":// (MASTER_ADDR:MASTER_PORT = " + where + ")");
  }
  rdv.store = std::move(client.value());
  return rdv;
}

Result<Rendezvous> HostFileStore(const InitSpec& spec, Deadline deadline) {
  const std::string& path = spec.file_path;
  // Whatever an earlier run left is void from now on.
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return IoError("rank 0 cannot remove the old rendezvous file " + path, errno);
  }
  Rendezvous rdv;
  Result<std::unique_ptr<StoreServer>> server = StoreServer::Start("", 0, spec.secret);
  if (!server.ok()) return server.status().WithContext("rank 0 starting the store for file://" + path);
  rdv.server = std::move(server.value());
  FileRecord rec;
  rec.host = DefaultHostAddress();
  rec.port = rdv.server->port();
  rec.nonce = RandomHex();
  rec.world_size = spec.world_size;
  rec.writer = HostName() + " pid " + std::to_string(getpid());
  Result<std::unique_ptr<StoreClient>> client = StoreClient::Connect(rec.host, rec.port, deadline, spec.secret);
  if (!client.ok()) return client.status().WithContext("rank 0 connecting to its own store");
  StoreClient& own = *client.value();
  rdv.store = std::move(client.value());
  // The nonce goes into the store before the file exists: a rank that reads the
  // file can always verify it.
  CHORUS_RETURN_IF_ERROR(own.Set(kWorldKey, std::to_string(spec.world_size)));
  CHORUS_RETURN_IF_ERROR(own.Set(kNonceKey, rec.nonce));
  CHORUS_RETURN_IF_ERROR(ClaimRank(own, rec.nonce, 0, path));
  CHORUS_RETURN_IF_ERROR(WriteFileAtomically(path, FormatRecord(rec)));
  CHORUS_INFO("rank 0: store at " << JoinHostPort(rec.host, rec.port) << " published in " << path << " (nonce "
                                  << rec.nonce << ")");
  return rdv;
}

// Connects to the store a record names and checks it is this run's. On success
// `*client` is set; otherwise the returned status says why the record is rejected.
Status TryRecord(const InitSpec& spec, const FileRecord& rec, Deadline deadline, int64_t connect_ms,
                 std::unique_ptr<StoreClient>* client) {
  const std::string where = JoinHostPort(rec.host, rec.port);
  // Rank 0's store is up before its file exists, so no answer means "stale" or "slow":
  // try briefly, re-read the file, and try again with more patience.
  Result<std::unique_ptr<StoreClient>> c =
      StoreClient::Connect(rec.host, rec.port, deadline.Earlier(Deadline::AfterMs(connect_ms)), spec.secret);
  if (!c.ok() && c.status().code() == StatusCode::kMismatch) {
    return MismatchError("it names the store " + where + " (written by " + rec.writer +
                         "), which refused: " + c.status().message());
  }
  if (!c.ok()) {
    return PeerFailed("it names the store " + where + " (written by " + rec.writer +
                      ") but nothing answers there; it looks stale from an earlier run (" + c.status().message() + ")");
  }
  Result<std::string> nonce = c.value()->Get(kNonceKey, std::chrono::milliseconds(1000));
  Result<std::string> world = c.value()->Get(kWorldKey, std::chrono::milliseconds(1000));
  if (!nonce.ok() && nonce.status().code() != StatusCode::kMismatch) {
    return PeerFailed("the store " + where + " it names did not answer (" + nonce.status().message() + ")");
  }
  if (!nonce.ok() || nonce.value() != rec.nonce) {
    return MismatchError("the store at " + where + " does not hold the file's run nonce " + rec.nonce +
                         ": the file is from another run");
  }
  if (!world.ok() || world.value() != std::to_string(spec.world_size)) {
    return MismatchError("the store at " + where + " is for world size " + (world.ok() ? world.value() : "?") +
                         ", this rank has " + std::to_string(spec.world_size));
  }
  CHORUS_RETURN_IF_ERROR(ClaimRank(*c.value(), rec.nonce, spec.rank, spec.file_path));
  *client = std::move(c.value());
  return Status::Ok();
}

Result<Rendezvous> FindFileStore(const InitSpec& spec, Deadline deadline) {
  const std::string& path = spec.file_path;
  const auto start = Clock::now();
  std::string rejected;  // the content last rejected: not retried until it changes
  Status why;            // why it was rejected
  bool seen = false;
  auto backoff = std::chrono::milliseconds(20);
  int64_t connect_ms = 500;  // doubles while a store stays silent (a loaded or emulated machine)
  for (;;) {
    std::ifstream in(path);
    if (in) {
      seen = true;
      std::stringstream ss;
      ss << in.rdbuf();
      std::string content = ss.str();
      if (content != rejected) {
        Result<FileRecord> rec = ParseRecord(content, path);
        std::unique_ptr<StoreClient> client;
        Status st = rec.ok() ? TryRecord(spec, rec.value(), deadline, connect_ms, &client) : rec.status();
        if (st.ok()) {
          Rendezvous rdv;
          rdv.store = std::move(client);
          return rdv;
        }
        CHORUS_INFO("rank " << spec.rank << ": ignoring rendezvous file " << path << ": " << st.message());
        // A store from another run stays rejected until the file changes; a silent one
        // is tried again, with more patience.
        if (st.code() == StatusCode::kPeerFailed) {
          connect_ms = std::min<int64_t>(connect_ms * 2, 8000);
        } else {
          rejected = content;
        }
        why = st;
      }
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min(backoff, std::chrono::milliseconds(deadline.RemainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  const std::string waited = FormatDuration(ElapsedMs(start));
  if (!seen) {
    return TimeoutError("rank " + std::to_string(spec.rank) + ": rendezvous file " + path + " did not appear within " +
                        waited + " (rank 0 writes it once its store is up; is rank 0 running, with the same path?)");
  }
  return TimeoutError("rank " + std::to_string(spec.rank) + ": no usable store found through rendezvous file " + path +
                      " within " + waited + "; last rejected because " + why.message());
}

}  // namespace

Result<Rendezvous> Join(const InitSpec& spec, Deadline deadline) {
  if (spec.world_size < 1 || spec.rank < 0 || spec.rank >= spec.world_size) {
    return InvalidArgument("rendezvous: rank " + std::to_string(spec.rank) + " is not in [0, " +
                           std::to_string(spec.world_size) + ")");
  }
  if (spec.secret.empty()) {
    static std::once_flag said;
    std::call_once(said, [] { CHORUS_INFO("no job secret: any process that reaches the store can join"); });
  }
  if (spec.method == "env" || spec.method == "tcp") {
    if (spec.master_addr.empty() || spec.master_port == 0) {
      return InvalidArgument("rendezvous " + spec.method + "://: no master address/port (" +
                             JoinHostPort(spec.master_addr, spec.master_port) + ")");
    }
    return JoinTcp(spec, deadline);
  }
  if (spec.method == "file") {
    if (spec.file_path.empty()) return InvalidArgument("rendezvous file://: no file path");
    return spec.rank == 0 ? HostFileStore(spec, deadline) : FindFileStore(spec, deadline);
  }
  return InvalidArgument("rendezvous: unknown method '" + spec.method + "' (env, tcp or file)");
}

}  // namespace chorus::rendezvous
