#include "tools/perf/options.h"

#include <cerrno>
#include <cstdlib>
#include <map>

#include "common/env.h"

namespace chorus {
namespace perf {
namespace {

Result<int64_t> ParseInt(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return InvalidArgument(flag + " expects an integer, got '" + text + "'");
  }
  if (v < min || v > max) {
    return InvalidArgument(flag + "=" + text + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) +
                           "]");
  }
  return static_cast<int64_t>(v);
}

// Canonical long names; the short ones map onto them.
const std::map<std::string, std::string>& ShortFlags() {
  static const std::map<std::string, std::string> m = {
      {"-b", "--minbytes"}, {"-e", "--maxbytes"},     {"-f", "--stepfactor"}, {"-i", "--stepbytes"},
      {"-n", "--iters"},    {"-w", "--warmup_iters"}, {"-c", "--check"},      {"-d", "--datatype"},
      {"-o", "--op"},       {"-r", "--root"},         {"-h", "--help"},       {"-I", "--iter-bytes"},
  };
  return m;
}

bool IsBoolFlag(const std::string& f) {
  return f == "--progress" || f == "--help" || f == "--device" || f == "--blocking";
}

}  // namespace

std::string UsageText() {
  return "usage: chorus_perf [COLLECTIVE] [flags]\n"
         "  COLLECTIVE / --coll NAME   all_reduce (default), broadcast, reduce, all_gather, reduce_scatter,\n"
         "                             all_to_all, sendrecv, barrier, gather, scatter\n"
         "  --backend chorus|gloo|mpi|nccl  library to measure (default chorus; nccl is loaded at\n"
         "                             run time and implies --device)\n"
         "  --algo NAME                backend variant (gloo all_reduce: ring, ring_chunked,\n"
         "                             halving_doubling, bcube, ring_legacy; chorus: what CHORUS_ALGO\n"
         "                             takes, e.g. ring, recursive_doubling, tree; default its selector)\n"
         "  -b/--minbytes SIZE         smallest size (default 8; K/M/G suffixes)\n"
         "  -e/--maxbytes SIZE         largest size (default 32M)\n"
         "  -f/--stepfactor N          multiply the size by N each step (default 2)\n"
         "  -i/--stepbytes SIZE        add SIZE each step instead\n"
         "  -n/--iters N               timed iterations per size (default 20)\n"
         "  -w/--warmup_iters N        untimed iterations first (default 5)\n"
         "  -I/--iter-bytes SIZE       at small sizes, iterations enough for SIZE bytes (at most 100x -n;\n"
         "                             warmups alike): steadier times for sub-microsecond calls\n"
         "  -c/--check 0|1             verify results (default 1)\n"
         "  -d/--datatype T            float32 (default), float64, float16, bfloat16, int8, uint8, int32, int64\n"
         "  -o/--op OP                 sum (default), prod, max, min, avg\n"
         "  -r/--root R                root rank for rooted collectives (default 0)\n"
         "  --csv FILE, --json FILE    also write the results there (rank 0)\n"
         "  --progress                 print a line to stderr as each size completes\n"
         "  --gloo-store DIR           gloo rendezvous through a FileStore in DIR (fresh, shared by all\n"
         "                             ranks) instead of the TCP store at MASTER_ADDR:MASTER_PORT\n"
         "  --timeout SECONDS          per-operation timeout (default 120)\n"
         "  --device                   buffers in CUDA device memory (chorus, nccl); results checked on\n"
         "                             host copies made outside the timed loop; calls are enqueued in\n"
         "                             stream order and the stream is waited for once after each loop\n"
         "                             (as nccl-tests times NCCL)\n"
         "  --blocking                 with --device, wait for each call before the next\n"
         "  --nccl-lib PATH            NCCL to load (default $CHORUS_PERF_NCCL_LIB, else libnccl.so.2)\n"
         "env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (gloo, chorus), CHORUS_SOCKET_IFNAME\n";
}

Result<PerfOptions> ParseFlags(const std::vector<std::string>& args) {
  PerfOptions o;
  bool coll_seen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (flag.rfind("--", 0) == 0) {
      const size_t eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        has_value = true;
      }
    } else if (flag.size() >= 2 && flag[0] == '-' && !(flag[1] >= '0' && flag[1] <= '9')) {
      auto it = ShortFlags().find(flag.substr(0, 2));
      if (it == ShortFlags().end()) return InvalidArgument("unknown flag '" + flag + "'\n" + UsageText());
      if (flag.size() > 2) {  // "-b8"
        value = flag.substr(2);
        has_value = true;
      }
      flag = it->second;
    } else {
      if (!coll_seen) {  // the collective as a subcommand, anywhere among the flags
        Result<Collective> c = ParseCollective(flag);
        if (!c.ok()) return c.status();
        o.coll = c.value();
        coll_seen = true;
        continue;
      }
      return InvalidArgument("unexpected argument '" + flag + "'\n" + UsageText());
    }
    if (!has_value && !IsBoolFlag(flag)) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      value = args[++i];
    }

    if (flag == "--help") {
      o.help = true;
    } else if (flag == "--progress") {
      o.progress = true;
    } else if (flag == "--device") {
      o.device = true;
    } else if (flag == "--blocking") {
      o.blocking = true;
    } else if (flag == "--nccl-lib" || flag == "--nccl_lib") {
      o.nccl_lib = value;
    } else if (flag == "--iter-bytes") {
      Result<int64_t> v = ParseByteSize(flag, value);
      if (!v.ok()) return v.status();
      o.iter_bytes = v.value();
    } else if (flag == "--minbytes" || flag == "--maxbytes" || flag == "--stepbytes") {
      Result<int64_t> v = ParseByteSize(flag, value);
      if (!v.ok()) return v.status();
      (flag == "--minbytes" ? o.min_bytes : flag == "--maxbytes" ? o.max_bytes : o.step_bytes) = v.value();
    } else if (flag == "--stepfactor") {
      Result<int64_t> v = ParseInt(flag, value, 2, 1 << 20);
      if (!v.ok()) return v.status();
      o.step_factor = v.value();
    } else if (flag == "--iters" || flag == "--warmup_iters") {
      Result<int64_t> v = ParseInt(flag, value, flag == "--iters" ? 1 : 0, 1000000);
      if (!v.ok()) return v.status();
      (flag == "--iters" ? o.iters : o.warmup_iters) = static_cast<int>(v.value());
    } else if (flag == "--check") {
      Result<int64_t> v = ParseInt(flag, value, 0, 1);
      if (!v.ok()) return InvalidArgument("--check expects 0 or 1, got '" + value + "'");
      o.check = v.value() == 1;
    } else if (flag == "--datatype") {
      Result<DataType> v = ParseDataType(value);
      if (!v.ok()) return v.status();
      o.dtype = v.value();
    } else if (flag == "--op") {
      Result<ReduceOp> v = ParseReduceOp(value);
      if (!v.ok()) return v.status();
      o.op = v.value();
    } else if (flag == "--root") {
      Result<int64_t> v = ParseInt(flag, value, 0, 1 << 24);
      if (!v.ok()) return v.status();
      o.root = static_cast<int>(v.value());
    } else if (flag == "--coll" || flag == "--op_name") {
      Result<Collective> v = ParseCollective(value);
      if (!v.ok()) return v.status();
      o.coll = v.value();
    } else if (flag == "--backend") {
      if (value != "chorus" && value != "gloo" && value != "mpi" && value != "nccl") {
        return InvalidArgument("--backend expects chorus, gloo, mpi or nccl, got '" + value + "'");
      }
      o.backend = value;
    } else if (flag == "--algo") {
      o.algo = value;
    } else if (flag == "--csv") {
      o.csv_path = value;
    } else if (flag == "--json") {
      o.json_path = value;
    } else if (flag == "--gloo-store" || flag == "--gloo_store") {
      o.store = value;
    } else if (flag == "--timeout") {
      Result<int64_t> v = ParseInt(flag, value, 1, 86400);
      if (!v.ok()) return v.status();
      o.timeout_s = static_cast<int>(v.value());
    } else {
      return InvalidArgument("unknown flag '" + flag + "'\n" + UsageText());
    }
  }
  if (o.min_bytes > o.max_bytes) {
    return InvalidArgument("--minbytes (" + std::to_string(o.min_bytes) + ") is larger than --maxbytes (" +
                           std::to_string(o.max_bytes) + ")");
  }
  if (o.min_bytes <= 0 && o.step_bytes <= 0) {
    return InvalidArgument("--minbytes must be > 0 with a multiplicative step (-f)");
  }
  return o;
}

std::vector<int64_t> SizeSweep(const PerfOptions& o) {
  std::vector<int64_t> sizes;
  for (int64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    const int64_t next = o.step_bytes > 0 ? s + o.step_bytes : s * o.step_factor;
    if (next <= s) break;  // overflow guard
    s = next;
  }
  return sizes;
}

int IterationsAt(const PerfOptions& o, int64_t bytes) {
  if (o.iter_bytes <= 0 || bytes <= 0) return o.iters;
  const int64_t want = std::min<int64_t>(o.iter_bytes / bytes, int64_t{o.iters} * kMaxIterScale);
  return static_cast<int>(std::max<int64_t>(o.iters, want));
}

int WarmupsAt(const PerfOptions& o, int64_t bytes) {
  return static_cast<int>(int64_t{o.warmup_iters} * IterationsAt(o, bytes) / o.iters);
}

}  // namespace perf
}  // namespace chorus
