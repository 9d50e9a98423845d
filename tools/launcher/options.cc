#include "tools/launcher/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

namespace chorus::launcher {
namespace {

Status ParseInt(const std::string& flag, const std::string& text, int min, int max, int* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    return InvalidArgument(flag + ": '" + text + "' is not an integer in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status ParseSeconds(const std::string& flag, const std::string& text, double* out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e7) {
    return InvalidArgument(flag + ": '" + text + "' is not a positive number of seconds");
  }
  *out = v;
  return Status::Ok();
}

// Flags are spelled with '-' canonically; '_' spellings (torchrun's) are accepted.
std::string Canonical(std::string flag) {
  for (size_t i = 2; i < flag.size(); ++i) {
    if (flag[i] == '_') flag[i] = '-';
  }
  return flag;
}

}  // namespace

Result<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  bool port_given = false;
  using Setter = std::function<Status(const std::string& flag, const std::string& value)>;
  const std::map<std::string, Setter> setters = {
      {"--nproc-per-node", [&](auto& f, auto& v) { return ParseInt(f, v, 1, 4096, &o.nproc_per_node); }},
      {"--nnodes", [&](auto& f, auto& v) { return ParseInt(f, v, 1, 1 << 20, &o.nnodes); }},
      {"--node-rank", [&](auto& f, auto& v) { return ParseInt(f, v, 0, 1 << 20, &o.node_rank); }},
      {"--master-addr",
       [&](auto& f, auto& v) {
         if (v.empty()) return InvalidArgument(f + ": empty address");
         o.master_addr = v;
         return Status::Ok();
       }},
      {"--master-port",
       [&](auto& f, auto& v) {
         port_given = true;
         return ParseInt(f, v, 1, 65535, &o.master_port);
       }},
      {"--timeout", [&](auto& f, auto& v) { return ParseSeconds(f, v, &o.timeout_s); }},
      {"--kill-grace", [&](auto& f, auto& v) { return ParseSeconds(f, v, &o.kill_grace_s); }},
      {"--tee-dir",
       [&](auto& f, auto& v) {
         if (v.empty()) return InvalidArgument(f + ": empty directory");
         o.tee_dir = v;
         return Status::Ok();
       }},
  };

  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program starts here (torchrun allows no "--")
    std::string flag = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto it = setters.find(Canonical(flag));
    if (it == setters.end()) return InvalidArgument("unknown flag '" + flag + "'");
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + ": missing value");
      value = args[++i];
    }
    CHORUS_RETURN_IF_ERROR(it->second(flag, value));
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.program.empty()) return InvalidArgument("no program given (usage: chorusrun [flags] -- program args...)");
  if (o.node_rank >= o.nnodes) {
    return InvalidArgument("--node-rank: " + std::to_string(o.node_rank) + " must be below --nnodes " +
                           std::to_string(o.nnodes));
  }
  if (static_cast<long long>(o.nnodes) * o.nproc_per_node > (1 << 24)) {
    return InvalidArgument("--nnodes x --nproc-per-node is too large");
  }
  if (!port_given && o.nnodes > 1) o.master_port = kDefaultMultiNodePort;
  return o;
}

std::string UsageText() {
  return "usage: chorusrun [flags] [--] program [args...]\n"
         "  --nproc-per-node N   processes on this node (default 1)\n"
         "  --nnodes M           number of nodes (default 1)\n"
         "  --node-rank K        rank of this node, 0..M-1 (default 0)\n"
         "  --master-addr A      address of rank 0's node (default 127.0.0.1)\n"
         "  --master-port P      port of the rendezvous (default: a free ephemeral port\n"
         "                       when --nnodes is 1, else 29500)\n"
         "  --timeout SECONDS    kill every rank after this long (default: none)\n"
         "  --kill-grace SECONDS SIGTERM -> SIGKILL delay when stopping ranks (default 5)\n"
         "  --tee-dir DIR        also write each rank's raw output to DIR/rank_R.{stdout,stderr}\n"
         "Flags accept '_' spellings (--nproc_per_node) and --flag=value.\n"
         "Each rank gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,\n"
         "LOCAL_WORLD_SIZE, GROUP_RANK and CHORUS_LAUNCHER=chorusrun.\n"
         "Exit: 0 if all ranks succeed; else the first failing rank's code (128+signal\n"
         "if killed), 124 on --timeout, 128+signal if chorusrun was signalled, 2 on usage errors.\n";
}

}  // namespace chorus::launcher
