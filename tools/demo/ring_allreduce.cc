// ring_allreduce: the chorus demo. Every rank joins through env:// (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, as torchrun sets them), then runs ring all-reduce
// (float32 sum) over a size sweep, checks every result, and rank 0 prints time,
// algbw and busbw per size, nccl-tests style.
//
//   ring_allreduce [--min-bytes 1K] [--max-bytes 64M] [--iters 10] [--warmup 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "common/env.h"

namespace {

struct Args {
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 64 << 20;
  int iters = 10;
  int warmup = 2;
};

int Usage(const char* why) {
  const bool help = std::string(why) == "help";
  std::fprintf(help ? stdout : stderr,
               "%s%s"
               "usage: ring_allreduce [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n"
               "  sizes take K/M/G suffixes; rank and world come from env:// (RANK, WORLD_SIZE,\n"
               "  MASTER_ADDR, MASTER_PORT) or a launcher (torchrun, chorusrun, SLURM, mpirun)\n",
               help ? "" : "ring_allreduce: ", help ? "" : (std::string(why) + "\n").c_str());
  return help ? 0 : 2;
}

bool ParseArgs(int argc, char** argv, Args* args, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      *error = "help";
      return false;
    }
    if (i + 1 >= argc) {
      *error = flag + " needs a value";
      return false;
    }
    std::string value = argv[++i];
    if (flag == "--min-bytes" || flag == "--max-bytes") {
      chorus::Result<int64_t> n = chorus::ParseByteSize(flag, value);
      if (!n.ok()) {
        *error = n.status().message();
        return false;
      }
      (flag == "--min-bytes" ? args->min_bytes : args->max_bytes) = n.value();
    } else if (flag == "--iters" || flag == "--warmup") {
      char* end = nullptr;
      long v = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > 1000000) {
        *error = flag + "='" + value + "' is not a count";
        return false;
      }
      (flag == "--iters" ? args->iters : args->warmup) = static_cast<int>(v);
    } else {
      *error = "unknown flag " + flag;
      return false;
    }
  }
  if (args->min_bytes < 4 || args->max_bytes < args->min_bytes || args->max_bytes > (int64_t{1} << 34) ||
      args->iters < 1) {
    *error = "need 4 <= --min-bytes <= --max-bytes <= 16G and --iters >= 1";
    return false;
  }
  return true;
}

// Rank r's input element i: small integers, so float32 sums are exact.
float Input(int rank, size_t i) { return static_cast<float>((rank + 1) * ((i % 7) + 1)); }

}  // namespace

int main(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, &args, &error)) return Usage(error.c_str());

  chorus::Options options;
  chorus::Config config = chorus::Config::Process();
  if (!chorus::Config::ProcessConfigStatus().ok()) {
    std::fprintf(stderr, "ring_allreduce: %s\n", chorus::Config::ProcessConfigStatus().ToString().c_str());
    return 1;
  }
  if (!config.algo) config.algo = chorus::algos::Algorithm::kRing;  // the demo shows the ring, unless told otherwise
  options.config = config;
  auto created = chorus::Communicator::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "ring_allreduce: %s\n", created.status().ToString().c_str());
    return 1;
  }
  chorus::Communicator& comm = **created;
  const int n = comm.size();
  if (comm.rank() == 0) {
    std::printf("# chorus ring_allreduce: %s\n", comm.Describe().c_str());
    std::printf("# float32 sum, %d iterations after %d warm-up, every result checked\n", args.iters, args.warmup);
    std::printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "#wrong");
  }
  int failures = 0;
  for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = Input(comm.rank(), i);
    double seconds = 0;
    for (int it = 0; it < args.warmup + args.iters; ++it) {
      auto t0 = std::chrono::steady_clock::now();
      chorus::Status st =
          comm.AllReduce(in.data(), out.data(), count, chorus::DataType::kFloat32, chorus::ReduceOp::kSum);
      auto t1 = std::chrono::steady_clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "ring_allreduce: rank %d: %s\n", comm.rank(), st.ToString().c_str());
        return 1;
      }
      if (it >= args.warmup) seconds += std::chrono::duration<double>(t1 - t0).count();
    }
    // Check the last result: sum over ranks of (r+1)*((i%7)+1).
    long long wrong = 0;
    const float ranks_factor = static_cast<float>(n) * static_cast<float>(n + 1) / 2;
    for (size_t i = 0; i < count; ++i) wrong += out[i] != ranks_factor * static_cast<float>((i % 7) + 1);
    // Rank 0 reports the slowest rank's time and the total of wrong elements.
    double times[2] = {seconds, static_cast<double>(wrong)}, reduced[2] = {0, 0};
    chorus::Status st = comm.AllReduce(times, reduced, 1, chorus::DataType::kFloat64, chorus::ReduceOp::kMax);
    chorus::Status st2 = comm.AllReduce(&times[1], &reduced[1], 1, chorus::DataType::kFloat64, chorus::ReduceOp::kSum);
    if (!st.ok() || !st2.ok()) {
      std::fprintf(stderr, "ring_allreduce: %s\n", (st.ok() ? st2 : st).ToString().c_str());
      return 1;
    }
    failures += reduced[1] != 0;
    if (comm.rank() == 0) {
      double t = reduced[0] / args.iters;
      double algbw = static_cast<double>(bytes) / t / 1e9;
      double busbw = algbw * 2.0 * (n - 1) / n;
      std::printf("  %12lld %12zu %12.1f %12.3f %12.3f %8.0f\n", static_cast<long long>(bytes), count, t * 1e6, algbw,
                  busbw, reduced[1]);
      std::fflush(stdout);
    }
  }
  chorus::Status st = comm.Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "ring_allreduce: shutdown: %s\n", st.ToString().c_str());
    return 1;
  }
  if (failures != 0) {
    if (comm.rank() == 0) std::fprintf(stderr, "ring_allreduce: %d sizes had wrong results\n", failures);
    return 1;
  }
  return 0;
}
