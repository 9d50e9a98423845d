// fault_rank: one rank of the fault-injection suite (tools/faults/run.sh). Joins
// through env:// like any launched program, says "running" once its communicator is
// up, then runs checked float32 all-reduces with a pause between them, so that faults
// land mid-job.
//
//   fault_rank [--iters N] [--count N] [--pause-ms N]
// Exit: 0 every all-reduce right; 1 an error (printed: what the suite calls clean);
// 3 a wrong result; 2 usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"

namespace {

bool ParseFlag(const char* text, long max, long* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long iters = 1000000, count = 16384, pause_ms = 10;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    long* target = flag == "--iters" ? &iters : flag == "--count" ? &count : flag == "--pause-ms" ? &pause_ms : nullptr;
    if (target == nullptr || i + 1 >= argc || !ParseFlag(argv[i + 1], 1L << 30, target)) {
      std::fprintf(stderr, "usage: fault_rank [--iters N] [--count N] [--pause-ms N] (bad: %s)\n", flag.c_str());
      return 2;
    }
  }
  auto created = chorus::Communicator::Create();
  if (!created.ok()) {
    std::fprintf(stderr, "fault_rank: create: %s\n", created.status().ToString().c_str());
    return 1;
  }
  chorus::Communicator& comm = **created;
  std::printf("fault_rank: rank %d: running\n", comm.rank());
  std::fflush(stdout);
  const int n = comm.size();
  std::vector<float> in(static_cast<size_t>(count)), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((comm.rank() + 1) * static_cast<int>(i % 5));
  for (long it = 0; it < iters; ++it) {
    chorus::Status st =
        comm.AllReduce(in.data(), out.data(), in.size(), chorus::DataType::kFloat32, chorus::ReduceOp::kSum);
    if (!st.ok()) {
      std::fprintf(stderr, "fault_rank: rank %d: %s\n", comm.rank(), st.ToString().c_str());
      return 1;
    }
    // Sum over ranks of (r+1)*(i%5): exact in float32.
    for (size_t i = 0; i < out.size(); ++i) {
      const int want = n * (n + 1) / 2 * static_cast<int>(i % 5);
      if (out[i] != static_cast<float>(want)) {
        std::fprintf(stderr, "fault_rank: rank %d: wrong result at %zu of iteration %ld\n", comm.rank(), i, it);
        return 3;
      }
    }
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  chorus::Status st = comm.Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "fault_rank: rank %d: shutdown: %s\n", comm.rank(), st.ToString().c_str());
    return 1;
  }
  std::printf("fault_rank: rank %d: ok\n", comm.rank());
  return 0;
}
