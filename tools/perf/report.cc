#include "tools/perf/report.h"

#include <cstdarg>
#include <cstdio>
#include <sstream>

#include "tools/perf/options.h"

namespace chorus {
namespace perf {
namespace {

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// nccl-tests prints fewer decimals as times grow so the column keeps its width.
std::string FormatTime(double us) {
  if (us >= 10000.0) return Printf("%8.0f", us);
  if (us >= 100.0) return Printf("%8.1f", us);
  return Printf("%8.2f", us);
}

std::string FormatMode(const ModeResult& r) {
  if (!r.ran) return Printf("%8s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  std::string wrong = r.checked ? Printf("%6lld", static_cast<long long>(r.wrong)) : Printf("%6s", "N/A");
  return FormatTime(r.time_us) + Printf("  %6.2f  %6.2f  ", r.algbw, r.busbw) + wrong;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += Printf("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out;
}

std::string JsonMode(const ModeResult& r) {
  if (!r.ran) return "null";
  std::string wrong = r.checked ? std::to_string(r.wrong) : "null";
  return Printf("{\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": ", r.time_us, r.algbw, r.busbw) +
         wrong + "}";
}

std::string CsvMode(const ModeResult& r) {
  if (!r.ran) return ",,,";
  return Printf("%.3f,%.4f,%.4f,", r.time_us, r.algbw, r.busbw) +
         (r.checked ? std::to_string(r.wrong) : std::string(""));
}

}  // namespace

const char* NcclTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kFloat16: return "half";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "?";
}

void ComputeBandwidth(Collective coll, int nranks, int64_t bytes, ModeResult* r) {
  if (r->time_us <= 0) {
    r->algbw = r->busbw = 0;
    return;
  }
  r->algbw = static_cast<double>(bytes) / (r->time_us * 1e-6) / 1e9;
  r->busbw = r->algbw * BusBwFactor(coll, nranks);
}

std::string FormatHeader(const RunInfo& info) {
  std::ostringstream os;
  os << "# chorus_perf: " << CollectiveName(info.coll) << "\n";
  os << "# backend: " << info.backend << "  algo: " << (info.algo.empty() ? "default" : info.algo) << "\n";
  if (!info.description.empty()) os << "# " << info.description << "\n";
  os << "# nranks: " << info.nranks << "  iters: " << info.iters << "  warmup_iters: " << info.warmup_iters
     << "  check: " << (info.check ? 1 : 0) << "\n";
  if (info.iter_bytes > 0) {
    os << "# iter_bytes: " << info.iter_bytes << " (smaller sizes run iter_bytes/size iterations, at most "
       << kMaxIterScale << "x iters; warmups alike)\n";
  }
  os << "# time: wall time of `iters` back-to-back calls after a barrier, divided by iters, max over ranks\n";
  if (!info.device_timing.empty()) os << "# device buffers: " << info.device_timing << "\n";
  for (size_t r = 0; r < info.hosts.size(); ++r) {
    os << "#  rank " << r << " host " << info.hosts[r] << "\n";
  }
  os << "#\n";
  return os.str();
}

std::string FormatColumnHeader() {
  std::string s;
  s += Printf("# %10s  %12s  %8s  %6s  %6s  %32s  %32s\n", "", "", "", "", "", "out-of-place", "in-place");
  s += Printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  s += Printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return s;
}

std::string FormatLine(const Line& l) {
  return Printf("  %10lld  %12lld  %8s  %6s  %6d  ", static_cast<long long>(l.bytes), static_cast<long long>(l.count),
                l.type.c_str(), l.redop.c_str(), l.root) +
         FormatMode(l.out_of_place) + "  " + FormatMode(l.in_place) + "\n";
}

double AverageBusBw(const std::vector<Line>& lines) {
  double sum = 0;
  int n = 0;
  for (const Line& l : lines) {
    for (const ModeResult* m : {&l.out_of_place, &l.in_place}) {
      if (!m->ran) continue;
      sum += m->busbw;
      ++n;
    }
  }
  return n == 0 ? 0.0 : sum / n;
}

std::string FormatFooter(const std::vector<Line>& lines, bool check) {
  int64_t wrong = 0;
  for (const Line& l : lines) wrong += l.out_of_place.wrong + l.in_place.wrong;
  std::string s;
  if (check) s += Printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
  s += Printf("# Avg bus bandwidth    : %g \n", AverageBusBw(lines));
  s += "#\n";
  return s;
}

std::string CsvHeader() {
  return "backend,algo,coll,nranks,size,count,type,redop,root,"
         "oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong\n";
}

std::string CsvRow(const RunInfo& info, const Line& l) {
  // The algo field may describe the variant in words: keep commas out of the CSV.
  std::string algo = info.algo;
  for (char& c : algo)
    if (c == ',') c = ';';
  return info.backend + "," + algo + "," + CollectiveName(info.coll) + "," + std::to_string(info.nranks) + "," +
         std::to_string(l.bytes) + "," + std::to_string(l.count) + "," + l.type + "," + l.redop + "," +
         std::to_string(l.root) + "," + CsvMode(l.out_of_place) + "," + CsvMode(l.in_place) + "\n";
}

std::string FormatJson(const RunInfo& info, const std::vector<Line>& lines) {
  std::ostringstream os;
  os << "{\n  \"backend\": \"" << JsonEscape(info.backend) << "\",\n  \"algo\": \"" << JsonEscape(info.algo)
     << "\",\n  \"description\": \"" << JsonEscape(info.description) << "\",\n  \"coll\": \""
     << CollectiveName(info.coll) << "\",\n  \"nranks\": " << info.nranks << ",\n  \"iters\": " << info.iters
     << ",\n  \"warmup_iters\": " << info.warmup_iters << ",\n  \"hosts\": [";
  for (size_t i = 0; i < info.hosts.size(); ++i) os << (i ? ", " : "") << "\"" << JsonEscape(info.hosts[i]) << "\"";
  os << "],\n  \"avg_busbw\": " << Printf("%.4f", AverageBusBw(lines)) << ",\n  \"results\": [\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    os << "    {\"size\": " << l.bytes << ", \"count\": " << l.count << ", \"type\": \"" << l.type
       << "\", \"redop\": \"" << l.redop << "\", \"root\": " << l.root
       << ", \"out_of_place\": " << JsonMode(l.out_of_place) << ", \"in_place\": " << JsonMode(l.in_place) << "}"
       << (i + 1 < lines.size() ? "," : "") << "\n";
  }
  os << "  ]\n}\n";
  return os.str();
}

}  // namespace perf
}  // namespace chorus
