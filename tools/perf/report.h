// Formatting of chorus_perf's output: nccl-tests' table on stdout, plus CSV and JSON
// files. Pure string builders, unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"
#include "tools/perf/collectives.h"

namespace chorus {
namespace perf {

// Facts for the header lines.
struct RunInfo {
  std::string backend;
  std::string algo;
  std::string description;
  Collective coll = Collective::kAllReduce;
  int nranks = 0;
  std::vector<std::string> hosts;  // one per rank
  int iters = 0;
  int warmup_iters = 0;
  int64_t iter_bytes = 0;  // --iter-bytes (0: iters at every size)
  bool check = true;
  // Device buffers: "" on host buffers, else how the device calls were waited for.
  std::string device_timing;
};

struct ModeResult {
  bool ran = false;
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes/s, as nccl-tests)
  double busbw = 0;
  bool checked = false;
  int64_t wrong = 0;
};

struct Line {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string type;   // nccl-tests names: float, double, half, bfloat16, int8, uint8, int32, int64
  std::string redop;  // "sum"... or "none"
  int root = -1;      // -1 for collectives without a root
  ModeResult out_of_place;
  ModeResult in_place;
};

// nccl-tests' name for the type column.
const char* NcclTypeName(DataType t);
// algbw and busbw for `bytes` moved in `time_us`.
void ComputeBandwidth(Collective coll, int nranks, int64_t bytes, ModeResult* r);

std::string FormatHeader(const RunInfo& info);
std::string FormatColumnHeader();
std::string FormatLine(const Line& line);
// Average of busbw over every line and both modes (nccl-tests' closing figure).
double AverageBusBw(const std::vector<Line>& lines);
std::string FormatFooter(const std::vector<Line>& lines, bool check);

std::string CsvHeader();
std::string CsvRow(const RunInfo& info, const Line& line);
std::string FormatJson(const RunInfo& info, const std::vector<Line>& lines);

}  // namespace perf
}  // namespace chorus
