#include "tools/perf/runner.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <tuple>
#include <utility>

#include "kernels/cuda/device_memory.h"
#include "tools/perf/pattern.h"

namespace chorus {
namespace perf {
namespace {

using Clock = std::chrono::steady_clock;

// Buffers aligned like malloc's large allocations; zeroed once so pages are mapped
// before timing. With --device the collectives run on `dev`, a device mirror of
// `bytes`: inputs are filled on the host and uploaded, results downloaded to check.
struct Buffer {
  std::vector<char> bytes;
  kernels::cuda::DeviceBuffer dev;
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
  Status Resize(size_t n, bool device) {
    bytes.resize(n);
    if (!device || dev.bytes() == n) return Status::Ok();
    dev = kernels::cuda::DeviceBuffer();
    Result<kernels::cuda::DeviceBuffer> d = kernels::cuda::DeviceBuffer::Allocate(n);
    if (!d.ok()) return d.status();
    dev = std::move(d.value());
    return Status::Ok();
  }
  Status Upload() {
    return bytes.empty() ? Status::Ok() : kernels::cuda::CopyToDevice(dev.get(), bytes.data(), bytes.size());
  }
  Status Download() {
    return bytes.empty() ? Status::Ok() : kernels::cuda::CopyToHost(bytes.data(), dev.get(), bytes.size());
  }
};

// Host names of all ranks, gathered through the backend itself (a uint8 all_gather of
// fixed-size records); falls back to this rank's name only. A backend that takes device
// buffers only gets device copies: NCCL reads a host pointer as a device address, and
// the fault poisons every later CUDA call of the process.
std::vector<std::string> GatherHosts(Backend& b) {
  constexpr size_t kLen = 64;
  const bool device = b.requires_device_buffers();
  char name[kLen] = {0};
  ::gethostname(name, kLen - 1);
  std::vector<std::string> hosts{name};
  Buffer mine, all;
  if (!mine.Resize(kLen, device).ok() || !all.Resize(kLen * b.size(), device).ok()) return hosts;
  std::memcpy(mine.bytes.data(), name, kLen);
  const bool ok = device
                      ? mine.Upload().ok() && b.AllGather(mine.dev.get(), all.dev.get(), kLen, DataType::kUint8).ok() &&
                            b.Flush().ok() && all.Download().ok()
                      : b.AllGather(mine.data(), all.data(), kLen, DataType::kUint8).ok();
  if (!ok) return hosts;
  hosts.clear();
  for (int r = 0; r < b.size(); ++r) {
    const char* theirs = all.bytes.data() + r * kLen;
    hosts.emplace_back(theirs, strnlen(theirs, kLen));
  }
  return hosts;
}

// One mode (out of place or in place) for one size: warmup, timed loop, checked call.
Status RunMode(Backend& b, const PerfOptions& o, const CollShape& shape, bool in_place, Buffer& send_buf,
               Buffer& recv_buf, ModeResult* result) {
  const size_t elt = DataTypeSize(o.dtype);
  const int rank = b.rank();
  // The same layout on the host (filled, checked) and, with --device, on the device (run).
  auto place = [&](void* send_base, void* recv_base) -> std::pair<void*, void*> {
    if (!in_place) return {send_base, recv_base};
    if (recv_base == nullptr) return {nullptr, nullptr};
    char* base = static_cast<char*>(recv_base);
    return {base + shape.inplace_send_offset * elt, base + shape.inplace_recv_offset * elt};
  };
  void* send = nullptr;
  void* recv = nullptr;
  std::tie(send, recv) = place(send_buf.data(), recv_buf.data());
  CallArgs args;
  std::tie(args.send, args.recv) = o.device ? place(send_buf.bytes.empty() ? nullptr : send_buf.dev.get(),
                                                    recv_buf.bytes.empty() ? nullptr : recv_buf.dev.get())
                                            : std::pair<void*, void*>(send, recv);
  args.count = shape.param_count;
  args.dtype = o.dtype;
  args.op = o.op;
  args.root = o.root;

  auto fill = [&]() -> Status {
    if (o.coll == Collective::kBarrier) return Status::Ok();
    if (in_place)
      ClearBuffer(o.dtype, std::max(shape.send_count, shape.recv_count), recv_buf.data());
    else
      ClearBuffer(o.dtype, shape.recv_count, recv);
    FillInput(o.coll, o.dtype, o.op, rank, shape.send_count, send);
    if (!o.device) return Status::Ok();
    CHORUS_RETURN_IF_ERROR(send_buf.Upload());
    return recv_buf.Upload();
  };

  CHORUS_RETURN_IF_ERROR(fill());
  const int iters = IterationsAt(o, static_cast<int64_t>(shape.bytes));
  for (int i = WarmupsAt(o, static_cast<int64_t>(shape.bytes)); i > 0; --i)
    CHORUS_RETURN_IF_ERROR(RunCollective(b, o.coll, args));
  CHORUS_RETURN_IF_ERROR(b.Flush());
  CHORUS_RETURN_IF_ERROR(b.Barrier());
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) CHORUS_RETURN_IF_ERROR(RunCollective(b, o.coll, args));
  CHORUS_RETURN_IF_ERROR(b.Flush());  // calls enqueued in stream order end here
  const double local_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  Result<double> max_us = b.AllReduceMaxDouble(local_us);
  if (!max_us.ok()) return max_us.status();
  result->ran = true;
  result->time_us = max_us.value();
  ComputeBandwidth(o.coll, b.size(), static_cast<int64_t>(shape.bytes), result);

  if (o.check && o.coll != Collective::kBarrier) {
    // Like nccl-tests: inputs are re-filled (in place they were overwritten) and one more
    // call's result is checked.
    CHORUS_RETURN_IF_ERROR(fill());
    CHORUS_RETURN_IF_ERROR(RunCollective(b, o.coll, args));
    CHORUS_RETURN_IF_ERROR(b.Flush());
    if (o.device) CHORUS_RETURN_IF_ERROR(recv_buf.Download());
    const int64_t wrong = CountWrong(o.coll, o.dtype, o.op, rank, b.size(), o.root, shape, recv);
    Result<double> total = b.AllReduceSumDouble(static_cast<double>(wrong));
    if (!total.ok()) return total.status();
    result->checked = true;
    result->wrong = static_cast<int64_t>(total.value());
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return IoError("cannot open '" + path + "' for writing", errno);
  f << text;
  f.close();
  if (!f) return IoError("writing '" + path + "'", errno);
  return Status::Ok();
}

}  // namespace

Result<RunSummary> RunBenchmark(Backend& b, const PerfOptions& o, std::ostream& out) {
  const int n = b.size();
  const bool printer = b.rank() == 0;
  if (HasRoot(o.coll) && o.root >= n) {
    return InvalidArgument("--root " + std::to_string(o.root) + " is not a rank (world size " + std::to_string(n) +
                           ")");
  }
  CHORUS_RETURN_IF_ERROR(b.Supports(o.coll, o.dtype, o.op));

  RunInfo info;
  info.backend = b.name();
  info.algo = b.algo();
  info.description = b.description();
  info.coll = o.coll;
  info.nranks = n;
  info.hosts = GatherHosts(b);
  info.iters = o.iters;
  info.warmup_iters = o.warmup_iters;
  info.iter_bytes = o.iter_bytes;
  info.check = o.check && o.coll != Collective::kBarrier;
  if (o.device) {
    info.device_timing = o.blocking ? "each call waited for before the next (--blocking)"
                                    : "calls enqueued in stream order, the stream waited for once after the "
                                      "last call (as nccl-tests times NCCL)";
  }
  if (printer) out << FormatHeader(info) << FormatColumnHeader() << std::flush;

  std::vector<int64_t> sizes = SizeSweep(o);
  if (o.coll == Collective::kBarrier) sizes = {0};  // no payload: one line
  RunSummary summary;
  Buffer send_buf, recv_buf;
  for (int64_t requested : sizes) {
    const CollShape shape = ShapeFor(o.coll, static_cast<size_t>(requested), o.dtype, n, b.rank());
    if (shape.send_count > static_cast<size_t>(INT_MAX) || shape.recv_count > static_cast<size_t>(INT_MAX)) {
      return InvalidArgument("size " + std::to_string(requested) + " B is more than 2^31 elements");
    }
    const size_t elt = DataTypeSize(o.dtype);
    const size_t buf_elems = std::max(shape.send_count, shape.recv_count);
    CHORUS_RETURN_IF_ERROR(send_buf.Resize(shape.send_count * elt, o.device));
    CHORUS_RETURN_IF_ERROR(recv_buf.Resize(buf_elems * elt, o.device));  // also the in-place buffer

    Line line;
    line.bytes = static_cast<int64_t>(shape.bytes);
    line.count = static_cast<int64_t>(shape.param_count);
    line.type = NcclTypeName(o.dtype);
    line.redop = HasReduceOp(o.coll) ? ReduceOpName(o.op) : "none";
    line.root = HasRoot(o.coll) ? o.root : -1;
    CHORUS_RETURN_IF_ERROR(
        RunMode(b, o, shape, false, send_buf, recv_buf, &line.out_of_place)
            .WithContext(std::string(CollectiveName(o.coll)) + " out-of-place " + std::to_string(shape.bytes) + " B"));
    if (o.coll != Collective::kBarrier) {
      CHORUS_RETURN_IF_ERROR(
          RunMode(b, o, shape, true, send_buf, recv_buf, &line.in_place)
              .WithContext(std::string(CollectiveName(o.coll)) + " in-place " + std::to_string(shape.bytes) + " B"));
    }
    summary.total_wrong += line.out_of_place.wrong + line.in_place.wrong;
    if (printer) {
      out << FormatLine(line) << std::flush;
      if (o.progress) {
        const std::string diag = b.diagnostics();
        std::cerr << "[chorus_perf] " << line.bytes << " B done" << (diag.empty() ? "" : "; " + diag) << "\n";
      }
    }
    summary.lines.push_back(line);
  }
  if (printer) {
    out << FormatFooter(summary.lines, info.check);
    const std::string diag = b.diagnostics();
    if (!diag.empty()) out << "# " << diag << "\n";
    for (const Line& l : summary.lines) {
      const std::string why = b.explain(o.coll, static_cast<size_t>(l.count), o.dtype);
      if (!why.empty()) out << "# " << why << "\n";  // names the size itself
    }
    out << std::flush;
    if (!o.csv_path.empty()) {
      std::string csv = CsvHeader();
      for (const Line& l : summary.lines) csv += CsvRow(info, l);
      CHORUS_RETURN_IF_ERROR(WriteFile(o.csv_path, csv));
    }
    if (!o.json_path.empty()) CHORUS_RETURN_IF_ERROR(WriteFile(o.json_path, FormatJson(info, summary.lines)));
  }
  return summary;
}

}  // namespace perf
}  // namespace chorus
