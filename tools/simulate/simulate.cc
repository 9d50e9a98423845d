#include "tools/simulate/simulate.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/env.h"

namespace chorus::simulate {
namespace {

using algos::Algorithm;
using algos::Collective;
using algos::LinkCost;
using algos::LinkKind;

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// GB/s = 1e3 bytes per microsecond, as the cost model counts it.
double Us(double bytes, double gbps) { return bytes / (gbps * 1e3); }

Result<double> ParseNumber(const std::string& flag, const std::string& text, std::string* suffix) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(v)) {
    return InvalidArgument(flag + " expects a number, got '" + text + "'");
  }
  *suffix = end;
  return v;
}

Result<double> ParseLatency(const std::string& flag, const std::string& text) {
  std::string suffix;
  Result<double> v = ParseNumber(flag, text, &suffix);
  if (!v.ok()) return v.status();
  if (!suffix.empty() && suffix != "us") {
    return InvalidArgument(flag + " takes microseconds (e.g. 2 or 2us), got '" + text + "'");
  }
  if (v.value() < 0) return InvalidArgument(flag + " must be at least 0 us, got '" + text + "'");
  return v;
}

// One unit only: GB/s (1e9 bytes a second), the cost model's. Bits are refused by name
// so that 100 Gbit/s is not taken for 100 GB/s.
Result<double> ParseGbps(const std::string& flag, const std::string& text) {
  std::string suffix;
  Result<double> v = ParseNumber(flag, text, &suffix);
  if (!v.ok()) return v.status();
  if (!suffix.empty() && suffix != "GB/s") {
    return InvalidArgument(flag + " takes GB/s (gigabytes a second, e.g. 12.5 or 12.5GB/s for 100 Gbit/s), got '" +
                           text + "' (unit '" + suffix + "')");
  }
  if (v.value() <= 0) return InvalidArgument(flag + " must be above 0 GB/s, got '" + text + "'");
  return v;
}

Result<double> ParseRanksPerCore(const std::string& flag, const std::string& text) {
  std::string suffix;
  Result<double> v = ParseNumber(flag, text, &suffix);
  if (!v.ok()) return v.status();
  if (!suffix.empty() || v.value() <= 0) {
    return InvalidArgument(flag + " takes ranks a core above 0 (e.g. 2 for 4 ranks on 2 cores), got '" + text + "'");
  }
  return v;
}

Result<int> ParseCount(const std::string& flag, const std::string& text, const char* what) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return InvalidArgument(flag + " expects an integer, got '" + text + "'");
  }
  if (v < 1 || v > (1 << 24)) {
    return InvalidArgument(flag + ": '" + text + "' is not " + what + " (1 to " + std::to_string(1 << 24) + ")");
  }
  return static_cast<int>(v);
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

Result<LinkKind> ParseLinkKind(const std::string& flag, const std::string& text) {
  for (LinkKind k : {LinkKind::kShm, LinkKind::kTcp, LinkKind::kRdma}) {
    if (text == algos::LinkName(k)) return k;
  }
  return InvalidArgument(flag + " expects shm, tcp or rdma, got '" + text + "'");
}

Result<Collective> ParseCollectiveName(const std::string& text) {
  std::string names;
  for (int v = static_cast<int>(Collective::kBarrier); v <= static_cast<int>(Collective::kAllToAll); ++v) {
    const auto c = static_cast<Collective>(v);
    if (text == algos::CollectiveName(c)) return c;
    names += std::string(names.empty() ? "" : ", ") + algos::CollectiveName(c);
  }
  return InvalidArgument("--colls: unknown collective '" + text + "' (one of " + names + ")");
}

std::string FormatBytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  size_t v = bytes;
  while (u < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + " " + units[u];
}

std::string Fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string LinkText(LinkKind kind, const LinkCost& l) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s %.2f us, %.3g GB/s", algos::LinkName(kind), l.latency_us, l.gbps);
  return buf;
}

// The algorithms that appear in `rows`, in order of first appearance.
std::vector<Algorithm> AlgorithmsOf(const std::vector<Row>& rows) {
  std::vector<Algorithm> out;
  for (const Row& r : rows) {
    for (const auto& [a, us] : r.predicted) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
  return out;
}

double PredictionOf(const Row& r, Algorithm a) {
  for (const auto& [b, us] : r.predicted) {
    if (a == b) return us;
  }
  return -1;
}

}  // namespace

std::string SimUsage() {
  return "usage: simulate [flags]\n"
         "  Predicts each collective by every algorithm that can run it, from the selector's cost\n"
         "  model (algos/cost_model.cc), marks Selector::Choose's pick and prints the lower bounds.\n"
         "  --intra shm|tcp|rdma         link within hosts (default shm): the table's row\n"
         "  --inter shm|tcp|rdma         link between hosts (default tcp)\n"
         "  --intra-latency-us US        replace the within-host latency per message\n"
         "  --intra-gbps GB/S            replace the within-host bandwidth per pair, GB/s (bytes)\n"
         "  --inter-latency-us US        replace the between-host latency per message\n"
         "  --inter-gbps GB/S            replace the between-host bandwidth, GB/s (bytes; 100 Gbit/s\n"
         "                               is 12.5); a host's ranks share it where the model says so\n"
         "  --ranks-per-host N           ranks on each host, in rank order (default 8)\n"
         "  --ranks-per-core K           ranks a core on the most crowded machine (default 1: a core\n"
         "                               each); above 1 a prediction's bytes take K times as long and\n"
         "                               its messages' latency 1.5K times, as crowded real runs do\n"
         "  --ranks N,N,...              world sizes (default 16,64,256,1024,4096)\n"
         "  --colls NAME,...             collectives (default all_reduce,all_gather,reduce_scatter,broadcast)\n"
         "  -b/--minbytes SIZE           smallest size (default 8; K/M/G suffixes)\n"
         "  -e/--maxbytes SIZE           largest size (default 1G)\n"
         "  -f/--stepfactor N            multiply the size by N each step (default 2)\n"
         "  --chunk-bytes SIZE           the algorithms' pipelining chunk (default the model's)\n"
         "  --csv                        CSV instead of the table and summary\n";
}

Result<SimOptions> ParseSimFlags(const std::vector<std::string>& args) {
  SimOptions o;
  o.model.intra = LinkKind::kShm;
  o.model.inter = LinkKind::kTcp;
  o.sweep.min_bytes = 8;
  o.sweep.max_bytes = int64_t{1} << 30;
  o.sweep.step_factor = 2;
  std::optional<double> intra_lat, intra_gbps, inter_lat, inter_gbps;
  const std::map<std::string, std::string> short_flags = {
      {"-b", "--minbytes"}, {"-e", "--maxbytes"}, {"-f", "--stepfactor"}, {"-h", "--help"}};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    } else if (auto it = short_flags.find(flag.substr(0, 2)); flag.rfind("--", 0) != 0 && it != short_flags.end()) {
      if (flag.size() > 2) {  // "-b8"
        value = flag.substr(2);
        has_value = true;
      }
      flag = it->second;
    }
    if (flag == "--help") {
      o.help = true;
      continue;
    }
    if (flag == "--csv") {
      o.csv = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + args[i] + "'\n" + SimUsage());
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    Status bad;
    const auto take = [&bad](auto result, auto& into) {
      if (result.ok()) {
        into = result.value();
      } else {
        bad = result.status();
      }
    };
    if (flag == "--intra") {
      take(ParseLinkKind(flag, value), o.model.intra);
    } else if (flag == "--inter") {
      take(ParseLinkKind(flag, value), o.model.inter);
    } else if (flag == "--intra-latency-us") {
      take(ParseLatency(flag, value), intra_lat);
    } else if (flag == "--inter-latency-us") {
      take(ParseLatency(flag, value), inter_lat);
    } else if (flag == "--intra-gbps") {
      take(ParseGbps(flag, value), intra_gbps);
    } else if (flag == "--inter-gbps") {
      take(ParseGbps(flag, value), inter_gbps);
    } else if (flag == "--ranks-per-host") {
      take(ParseCount(flag, value, "a number of ranks per host"), o.ranks_per_host);
    } else if (flag == "--ranks-per-core") {
      take(ParseRanksPerCore(flag, value), o.model.crowding);
    } else if (flag == "--ranks") {
      o.world_sizes.clear();
      for (const std::string& part : SplitCommas(value)) {
        int n = 0;
        take(ParseCount(flag, part, "a world size"), n);
        if (!bad.ok()) break;
        o.world_sizes.push_back(n);
      }
    } else if (flag == "--colls") {
      o.collectives.clear();
      for (const std::string& part : SplitCommas(value)) {
        Collective c{};
        take(ParseCollectiveName(part), c);
        if (!bad.ok()) break;
        o.collectives.push_back(c);
      }
    } else if (flag == "--minbytes" || flag == "--maxbytes" || flag == "--chunk-bytes") {
      int64_t v = 0;
      take(ParseByteSize(flag, value), v);
      if (flag == "--minbytes") o.sweep.min_bytes = v;
      if (flag == "--maxbytes") o.sweep.max_bytes = v;
      if (flag == "--chunk-bytes") o.model.chunk_bytes = static_cast<size_t>(v);
    } else if (flag == "--stepfactor") {
      take(ParseCount(flag, value, "a step factor of at least 2"), o.sweep.step_factor);
      if (bad.ok() && o.sweep.step_factor < 2) {
        bad = InvalidArgument("--stepfactor must be at least 2, got '" + value + "'");
      }
    } else {
      return InvalidArgument("unknown flag '" + flag + "'\n" + SimUsage());
    }
    if (!bad.ok()) return bad;
  }
  if (o.sweep.min_bytes < 1 || o.sweep.min_bytes > o.sweep.max_bytes) {
    return InvalidArgument("-b (" + std::to_string(o.sweep.min_bytes) + ") must be at least 1 and at most -e (" +
                           std::to_string(o.sweep.max_bytes) + ")");
  }
  // The kinds pick the table's rows; a latency or bandwidth given replaces its half.
  const LinkCost intra = algos::CostOf(o.model.intra), inter = algos::CostOf(o.model.inter);
  if (intra_lat || intra_gbps)
    o.model.intra_cost = LinkCost{intra_lat.value_or(intra.latency_us), intra_gbps.value_or(intra.gbps)};
  if (inter_lat || inter_gbps)
    o.model.inter_cost = LinkCost{inter_lat.value_or(inter.latency_us), inter_gbps.value_or(inter.gbps)};
  return o;
}

Bounds LowerBounds(Collective c, size_t bytes, int world_size, int hosts, const LinkCost& intra,
                   const LinkCost& inter) {
  Bounds b;
  const int n = world_size;
  if (n < 2) return b;
  // Across hosts every byte a host sends or receives crosses its one link (the model's
  // hierarchical shares it among the host's ranks): the parts are hosts. On one host,
  // ranks.
  const bool across = hosts > 1;
  const double p = across ? hosts : n, link = across ? inter.gbps : intra.gbps;
  const double s = static_cast<double>(bytes);
  switch (c) {
    case Collective::kAllReduce: b.bandwidth_us = 2 * (p - 1) / p * Us(s, link); break;
    case Collective::kAllGather:      // s: the whole output
    case Collective::kReduceScatter:  // s: the whole input
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllToAll:  // s: everything one rank ends with
      b.bandwidth_us = (p - 1) / p * Us(s, link);
      break;
    case Collective::kBroadcast:
    case Collective::kReduce: b.bandwidth_us = Us(s, link); break;
    case Collective::kBarrier: break;
  }
  // Every rank must hear from every other: ceil(log2 n) rounds of messages, of which
  // ceil(log2 hosts) cross between hosts.
  const int rounds = CeilLog2(n), crossing = across ? CeilLog2(hosts) : 0;
  const double local_latency = across ? std::min(intra.latency_us, inter.latency_us) : intra.latency_us;
  b.latency_us = crossing * inter.latency_us + (rounds - crossing) * local_latency;
  return b;
}

double Row::ratio() const {
  const double bound = bounds.max();
  return bound > 0 ? chosen_us / bound : 0;
}

algos::Topology WorldOf(int world_size, int ranks_per_host) {
  std::vector<std::string> ids;
  ids.reserve(world_size);
  for (int r = 0; r < world_size; ++r) ids.push_back("host" + std::to_string(r / ranks_per_host));
  return algos::Topology::FromHostIds(ids);
}

std::vector<Row> Simulate(const SimOptions& options) {
  std::vector<Row> rows;
  const std::vector<int64_t> sizes = perf::SizeSweep(options.sweep);
  const LinkCost intra = options.model.IntraCost(), inter = options.model.InterCost();
  for (Collective c : options.collectives) {
    for (int n : options.world_sizes) {
      algos::SelectorConfig config;
      config.model = options.model;
      config.model.topology = WorldOf(n, options.ranks_per_host);
      const algos::Selector selector = *algos::Selector::Create(config);
      for (int64_t size : sizes) {
        Row r;
        r.collective = c;
        r.world_size = n;
        r.hosts = config.model.topology.num_hosts();
        r.bytes = static_cast<size_t>(size);
        r.predicted = selector.Predict(c, r.bytes, n);
        r.chosen = selector.Choose(c, r.bytes, n, /*explain=*/false).algorithm;
        r.chosen_us = PredictionOf(r, r.chosen);
        r.bounds = LowerBounds(c, r.bytes, n, r.hosts, intra, inter);
        rows.push_back(std::move(r));
      }
    }
  }
  return rows;
}

std::string FormatTable(const SimOptions& options, const std::vector<Row>& rows) {
  const algos::CostModel& m = options.model;
  std::string out =
      "# The selector's cost model (algos/cost_model.cc), hosts of " + std::to_string(options.ranks_per_host) +
      " ranks in rank order" +
      (m.crowding > 1
           ? ", " + Fixed(m.crowding) + " ranks a core (bytes k, latency 1.5k times as long, as crowded runs are)"
           : "") +
      ".\n"
      "# Within hosts: " +
      LinkText(m.intra, m.IntraCost()) + (m.intra_cost ? " (given)" : " (table)") +
      "; between hosts: " + LinkText(m.inter, m.InterCost()) + (m.inter_cost ? " (given)" : " (table)") +
      ". GB/s: 1e9 bytes a second, one direction.\n"
      "# bytes as the selector counts them: all_gather the whole output, reduce_scatter the whole input,\n"
      "#   all_to_all/gather/scatter everything one rank ends with, the others one rank's buffer.\n"
      "# Times in us. *: Selector::Choose's pick (all_gather by its measured rule, the others the lowest).\n"
      "# bw_lb: 2(p-1)/p*S/B all_reduce, (p-1)/p*S/B all_gather/reduce_scatter/gather/scatter/\n"
      "#   all_to_all, S/B broadcast/reduce; p and B: hosts and the link between them (a host's\n"
      "#   ranks share it), on one host ranks and the link within.\n"
      "# lat_lb: ceil(log2 n) messages, ceil(log2 hosts) of them between hosts.\n"
      "# ratio = chosen / max(bw_lb, lat_lb).\n";
  for (Collective c : options.collectives) {
    std::vector<Row> mine;
    for (const Row& r : rows) {
      if (r.collective == c) mine.push_back(r);
    }
    const std::vector<Algorithm> algs = AlgorithmsOf(mine);
    char buf[64];
    out += "\n" + std::string(algos::CollectiveName(c)) + "\n";
    std::snprintf(buf, sizeof(buf), "%6s %5s %9s", "ranks", "hosts", "bytes");
    out += buf;
    for (Algorithm a : algs) {
      std::snprintf(buf, sizeof(buf), " %19s", algos::AlgorithmName(a));
      out += buf;
    }
    std::snprintf(buf, sizeof(buf), " %19s %12s %12s %7s\n", "chosen", "bw_lb", "lat_lb", "ratio");
    out += buf;
    for (const Row& r : mine) {
      std::snprintf(buf, sizeof(buf), "%6d %5d %9s", r.world_size, r.hosts, FormatBytes(r.bytes).c_str());
      out += buf;
      for (Algorithm a : algs) {
        const double us = PredictionOf(r, a);
        const std::string cell = us < 0 ? "-" : Fixed(us) + (a == r.chosen ? "*" : " ");
        std::snprintf(buf, sizeof(buf), " %19s", cell.c_str());
        out += buf;
      }
      std::snprintf(buf, sizeof(buf), " %19s %12.1f %12.1f %7s\n", algos::AlgorithmName(r.chosen),
                    r.bounds.bandwidth_us, r.bounds.latency_us, r.bounds.max() > 0 ? Fixed(r.ratio()).c_str() : "-");
      out += buf;
    }
  }
  return out;
}

std::string FormatCsv(const std::vector<Row>& rows) {
  const std::vector<Algorithm> algs = AlgorithmsOf(rows);
  std::string out = "collective,ranks,hosts,bytes";
  for (Algorithm a : algs) out += std::string(",") + algos::AlgorithmName(a) + "_us";
  out += ",chosen,chosen_us,bw_lb_us,lat_lb_us,ratio\n";
  for (const Row& r : rows) {
    out += std::string(algos::CollectiveName(r.collective)) + "," + std::to_string(r.world_size) + "," +
           std::to_string(r.hosts) + "," + std::to_string(r.bytes);
    for (Algorithm a : algs) {
      const double us = PredictionOf(r, a);
      out += "," + (us < 0 ? std::string() : Fixed(us));
    }
    char buf[128];
    std::snprintf(buf, sizeof(buf), ",%s,%.1f,%.1f,%.1f,", algos::AlgorithmName(r.chosen), r.chosen_us,
                  r.bounds.bandwidth_us, r.bounds.latency_us);
    out += buf + (r.bounds.max() > 0 ? Fixed(r.ratio()) : std::string()) + "\n";
  }
  return out;
}

std::string FormatSummary(const std::vector<Row>& rows) {
  std::string out = "\n# Where each algorithm is chosen (sizes in which Selector::Choose picks it)\n";
  for (size_t i = 0; i < rows.size();) {
    size_t end = i;
    while (end < rows.size() && rows[end].collective == rows[i].collective &&
           rows[end].world_size == rows[i].world_size) {
      ++end;
    }
    out += std::string(algos::CollectiveName(rows[i].collective)) + " on " + std::to_string(rows[i].world_size) +
           " ranks (" + std::to_string(rows[i].hosts) + (rows[i].hosts == 1 ? " host" : " hosts") + "):";
    std::string dips;
    for (size_t j = i; j < end;) {
      size_t k = j;
      while (k + 1 < end && rows[k + 1].chosen == rows[j].chosen) ++k;
      out += std::string(j == i ? " " : ", ") + algos::AlgorithmName(rows[j].chosen) + " " +
             FormatBytes(rows[j].bytes) + (k > j ? ".." + FormatBytes(rows[k].bytes) : std::string());
      j = k + 1;
    }
    // A larger call predicted faster than a smaller one: a step in the model worth a look.
    for (size_t j = i + 1; j < end; ++j) {
      if (rows[j].chosen_us < rows[j - 1].chosen_us) {
        dips += " " + FormatBytes(rows[j - 1].bytes) + " " + Fixed(rows[j - 1].chosen_us) + " us > " +
                FormatBytes(rows[j].bytes) + " " + Fixed(rows[j].chosen_us) + " us;";
      }
    }
    out += "\n";
    if (!dips.empty()) out += "  note: the chosen time falls as the size grows:" + dips + "\n";
    i = end;
  }
  return out;
}

}  // namespace chorus::simulate
