#include "rendezvous/init_method.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>

#include "rendezvous/slurm_nodelist.h"

namespace chorus::rendezvous {
namespace {

constexpr int64_t kMaxRanks = 1 << 24;

// What a launcher told us. Fields stay -1 / empty when it did not say.
struct Launch {
  std::string source;
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  std::string master_addr;  // a default for MASTER_ADDR, from the launcher's host list
};

Status ReadInt(const EnvLookup& env, const std::string& name, int64_t min, int* out) {
  Result<int64_t> v = EnvInt(env, name, -1, min, kMaxRanks);
  if (!v.ok()) return v.status();
  *out = static_cast<int>(v.value());
  return Status::Ok();
}

// An integer variable that must be set once its launcher was detected.
Status RequireInt(const EnvLookup& env, const std::string& name, const std::string& launcher, int64_t min, int* out) {
  if (!env(name)) return InvalidArgument(name + " is not set although " + launcher + " was detected");
  return ReadInt(env, name, min, out);
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": the count for node `node`.
Result<int> SlurmTasksOnNode(const std::string& spec, int node) {
  int index = 0;
  size_t start = 0;
  while (start < spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int count = 0, repeat = 1;  // "4(x2)": 4 tasks on each of 2 nodes
    char tail = 0;
    const bool repeated = std::sscanf(item.c_str(), "%d(x%d)%c", &count, &repeat, &tail) == 2;
    if (!repeated && std::sscanf(item.c_str(), "%d%c", &count, &tail) != 1) {
      return InvalidArgument("SLURM_TASKS_PER_NODE='" + spec + "' is not of the form 4(x2),3");
    }
    if (count <= 0 || repeat <= 0) return InvalidArgument("SLURM_TASKS_PER_NODE='" + spec + "' has a zero count");
    if (node < index + repeat) return count;
    index += repeat;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return InvalidArgument("SLURM_TASKS_PER_NODE='" + spec + "' has no entry for node " + std::to_string(node));
}

Result<Launch> DetectSlurm(const EnvLookup& env) {
  Launch l;
  l.source = "SLURM";
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "SLURM_PROCID", 0, &l.rank));
  if (env("SLURM_NTASKS")) {
    CHORUS_RETURN_IF_ERROR(ReadInt(env, "SLURM_NTASKS", 1, &l.world_size));
  } else {
    CHORUS_RETURN_IF_ERROR(RequireInt(env, "SLURM_NPROCS", "SLURM (SLURM_PROCID)", 1, &l.world_size));
  }
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "SLURM_LOCALID", 0, &l.local_rank));
  if (env("SLURM_NTASKS_PER_NODE")) {
    CHORUS_RETURN_IF_ERROR(ReadInt(env, "SLURM_NTASKS_PER_NODE", 1, &l.local_world_size));
  } else if (std::optional<std::string> tpn = env("SLURM_TASKS_PER_NODE")) {
    int node = 0;
    CHORUS_RETURN_IF_ERROR(ReadInt(env, "SLURM_NODEID", 0, &node));
    Result<int> n = SlurmTasksOnNode(*tpn, std::max(node, 0));
    if (!n.ok()) return n.status();
    l.local_world_size = n.value();
  }
  std::optional<std::string> nodes = env("SLURM_JOB_NODELIST");
  if (!nodes) nodes = env("SLURM_NODELIST");
  if (nodes) {
    Result<std::string> first = FirstSlurmHost(*nodes);
    if (!first.ok()) return first.status();
    l.master_addr = first.value();
  }
  return l;
}

Result<Launch> DetectOpenMpi(const EnvLookup& env) {
  Launch l;
  l.source = "Open MPI";
  const std::string who = "Open MPI (OMPI_COMM_WORLD_RANK)";
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "OMPI_COMM_WORLD_RANK", 0, &l.rank));
  CHORUS_RETURN_IF_ERROR(RequireInt(env, "OMPI_COMM_WORLD_SIZE", who, 1, &l.world_size));
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, &l.local_rank));
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, &l.local_world_size));
  // Open MPI does not say which host runs rank 0: MASTER_ADDR must come from the user.
  return l;
}

Result<Launch> DetectPmi(const EnvLookup& env) {
  Launch l;
  const bool pbs = env("PBS_JOBID") || env("PBS_NODEFILE") || env("PBS_ENVIRONMENT");
  l.source = pbs ? "PBS" : "PMI";
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "PMI_RANK", 0, &l.rank));
  CHORUS_RETURN_IF_ERROR(RequireInt(env, "PMI_SIZE", l.source + " (PMI_RANK)", 1, &l.world_size));
  // MPICH-hydra's names for the node-local rank and count.
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "MPI_LOCALRANKID", 0, &l.local_rank));
  CHORUS_RETURN_IF_ERROR(ReadInt(env, "MPI_LOCALNRANKS", 1, &l.local_world_size));
  if (std::optional<std::string> nodefile = env("PBS_NODEFILE")) {
    std::ifstream in(*nodefile);
    std::string line;
    // Unreadable: no default, MASTER_ADDR is then required (and the error says so).
    if (in && std::getline(in, line)) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      l.master_addr = line;
    }
  }
  return l;
}

// torchrun's variables first (they are explicit), then the launchers.
Result<std::optional<Launch>> DetectLaunch(const EnvLookup& env) {
  if (env("RANK") || env("WORLD_SIZE")) {
    Launch l;
    l.source = "torchrun/env";
    if (!env("RANK")) return InvalidArgument("WORLD_SIZE is set but RANK is not");
    CHORUS_RETURN_IF_ERROR(ReadInt(env, "RANK", 0, &l.rank));
    if (!env("WORLD_SIZE")) return InvalidArgument("RANK is set but WORLD_SIZE is not");
    CHORUS_RETURN_IF_ERROR(ReadInt(env, "WORLD_SIZE", 1, &l.world_size));
    return std::optional<Launch>(l);
  }
  Result<Launch> l = Status(StatusCode::kUnavailable, "");
  if (env("SLURM_PROCID")) {
    l = DetectSlurm(env);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    l = DetectOpenMpi(env);
  } else if (env("PMI_RANK")) {
    l = DetectPmi(env);
  } else {
    return std::optional<Launch>();
  }
  if (!l.ok()) return l.status();
  return std::optional<Launch>(l.value());
}

// "host:port" with host a name, IPv4 literal or [IPv6] literal.
Status ParseHostPort(const std::string& url, const std::string& hostport, std::string* host, uint16_t* port) {
  std::string port_s;
  if (!hostport.empty() && hostport[0] == '[') {
    size_t close = hostport.find(']');
    if (close == std::string::npos || close + 1 >= hostport.size() || hostport[close + 1] != ':') {
      return InvalidArgument("init method '" + url + "': expected tcp://[ipv6]:port");
    }
    *host = hostport.substr(1, close - 1);
    port_s = hostport.substr(close + 2);
  } else {
    size_t colon = hostport.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("init method '" + url + "' has no port (expected tcp://host:port)");
    }
    *host = hostport.substr(0, colon);
    port_s = hostport.substr(colon + 1);
    if (host->find(':') != std::string::npos) {
      return InvalidArgument("init method '" + url + "': write IPv6 addresses in brackets, tcp://[addr]:port");
    }
  }
  while (!port_s.empty() && port_s.back() == '/') port_s.pop_back();
  if (host->empty()) return InvalidArgument("init method '" + url + "' has no host");
  Result<int64_t> p = EnvInt(MapEnv({{"port", port_s}}), "port", -1, 1, 65535);
  if (port_s.empty() || !p.ok()) {
    return InvalidArgument("init method '" + url + "' has a bad port '" + port_s + "' (expected 1-65535)");
  }
  *port = static_cast<uint16_t>(p.value());
  return Status::Ok();
}

std::string NoLauncherMessage(const std::string& var) {
  return var +
         " is not set and no launcher (torchrun, SLURM, Open MPI, PBS) was detected; pass it as an "
         "argument or set " +
         var;
}

}  // namespace

Result<InitSpec> ResolveInit(const std::string& init_method, int rank, int world_size, const EnvLookup& env) {
  InitSpec spec;
  const std::string url = init_method.empty() ? "env://" : init_method;
  if (url == "env://") {
    spec.method = "env";
  } else if (url.rfind("tcp://", 0) == 0) {
    spec.method = "tcp";
    CHORUS_RETURN_IF_ERROR(ParseHostPort(url, url.substr(6), &spec.master_addr, &spec.master_port));
  } else if (url.rfind("file://", 0) == 0) {
    spec.method = "file";
    spec.file_path = url.substr(7);
    if (spec.file_path.empty() || spec.file_path[0] != '/' || spec.file_path.back() == '/') {
      return InvalidArgument("init method '" + url + "' must name an absolute file path, like file:///tmp/rdv");
    }
  } else {
    return InvalidArgument("init method '" + url + "' is not supported (use env://, tcp://host:port or file:///path)");
  }

  if (rank < -1) return InvalidArgument("rank " + std::to_string(rank) + " is invalid (use -1 to read RANK)");
  if (world_size == 0 || world_size < -1) {
    return InvalidArgument("world_size " + std::to_string(world_size) + " is invalid (use -1 to read WORLD_SIZE)");
  }
  Result<std::optional<Launch>> launch = Status();
  if (rank >= 0 && world_size >= 1) {
    spec.source = "arguments";
    launch = std::optional<Launch>();
    // The launcher's local layout is still useful; ignore it if it is broken.
    Result<std::optional<Launch>> detected = DetectLaunch(env);
    if (detected.ok()) launch = detected;
  } else {
    launch = DetectLaunch(env);
    if (!launch.ok()) return launch.status();
    if (!launch.value()) return InvalidArgument(NoLauncherMessage(rank < 0 ? "RANK" : "WORLD_SIZE"));
    spec.source = launch.value()->source;
  }
  const Launch* l = launch.value() ? &*launch.value() : nullptr;
  spec.rank = rank >= 0 ? rank : l->rank;
  spec.world_size = world_size >= 1 ? world_size : l->world_size;
  // A launcher's node-local layout, when it describes the same job; torchrun's
  // LOCAL_RANK / LOCAL_WORLD_SIZE override it.
  if (l != nullptr && l->world_size == spec.world_size) {
    spec.local_rank = l->local_rank;
    spec.local_world_size = l->local_world_size;
  }
  if (env("LOCAL_RANK")) CHORUS_RETURN_IF_ERROR(ReadInt(env, "LOCAL_RANK", 0, &spec.local_rank));
  if (env("LOCAL_WORLD_SIZE")) CHORUS_RETURN_IF_ERROR(ReadInt(env, "LOCAL_WORLD_SIZE", 1, &spec.local_world_size));

  if (spec.rank >= spec.world_size) {
    return InvalidArgument("rank " + std::to_string(spec.rank) + " is out of range for world size " +
                           std::to_string(spec.world_size) + " (from " + spec.source + ")");
  }
  if (spec.local_rank >= 0 && spec.local_world_size >= 1 && spec.local_rank >= spec.local_world_size) {
    return InvalidArgument("local rank " + std::to_string(spec.local_rank) + " is out of range for local world size " +
                           std::to_string(spec.local_world_size));
  }

  if (spec.method == "env") {
    const bool launcher = l != nullptr && l->source != "torchrun/env";
    std::optional<std::string> addr = env("MASTER_ADDR");
    if (addr) {
      spec.master_addr = *addr;
    } else if (l != nullptr && !l->master_addr.empty()) {
      spec.master_addr = l->master_addr;
    } else {
      return InvalidArgument(
          "MASTER_ADDR is not set (env:// needs it" +
          std::string(l && l->source == "Open MPI"
                          ? "; Open MPI does not say which host runs rank 0: mpirun -x MASTER_ADDR=..."
                          : "") +
          ")");
    }
    if (spec.master_addr.size() > 2 && spec.master_addr.front() == '[' && spec.master_addr.back() == ']') {
      spec.master_addr = spec.master_addr.substr(1, spec.master_addr.size() - 2);
    }
    if (!env("MASTER_PORT") && !launcher) {
      return InvalidArgument("MASTER_PORT is not set (env:// needs it)");
    }
    Result<int64_t> port = EnvInt(env, "MASTER_PORT", kDefaultMasterPort, 1, 65535);
    if (!port.ok()) return port.status();
    spec.master_port = static_cast<uint16_t>(port.value());
  }
  return spec;
}

}  // namespace chorus::rendezvous
