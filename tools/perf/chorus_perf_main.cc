// chorus_perf: nccl-tests-style bandwidth/latency sweeps through chorus, gloo or MPI.
//
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 chorus_perf all_reduce --backend gloo -b 8 -e 64M &
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 chorus_perf all_reduce --backend gloo -b 8 -e 64M
//   mpirun -np 2 chorus_perf all_reduce --backend mpi -b 8 -e 64M
//
// Exit status: 0 all good, 1 a setup or run error (message on stderr), 2 wrong results.
#include <iostream>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "kernels/cuda/reduce_cuda.h"
#include "tools/perf/backend.h"
#include "tools/perf/options.h"
#include "tools/perf/runner.h"

namespace chorus {
namespace perf {
namespace {

Result<BackendOptions> OptionsFromEnv(const PerfOptions& p, const EnvLookup& env) {
  BackendOptions o;
  o.algo = p.algo;
  o.store = p.store;
  o.timeout = std::chrono::seconds(p.timeout_s);
  o.nccl_lib = p.nccl_lib.empty() ? env("CHORUS_PERF_NCCL_LIB").value_or("") : p.nccl_lib;
  if (p.backend == "mpi") return o;  // MPI has its own launcher and rendezvous
  Result<int64_t> rank = EnvInt(env, "RANK", -1, 0, 1 << 20);
  Result<int64_t> world = EnvInt(env, "WORLD_SIZE", -1, 1, 1 << 20);
  Result<int64_t> port = EnvInt(env, "MASTER_PORT", 0, 1, 65535);
  for (const Status& s : {rank.status(), world.status(), port.status()}) {
    if (!s.ok()) return s;
  }
  if (rank.value() < 0 || world.value() < 0) {
    return InvalidArgument("--backend " + p.backend +
                           " needs RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT) in the environment, as torchrun "
                           "sets them");
  }
  if (rank.value() >= world.value()) {
    return InvalidArgument("RANK=" + std::to_string(rank.value()) +
                           " is not below WORLD_SIZE=" + std::to_string(world.value()));
  }
  o.rank = static_cast<int>(rank.value());
  o.world_size = static_cast<int>(world.value());
  o.master_addr = env("MASTER_ADDR").value_or("");
  o.master_port = static_cast<int>(port.value());
  if (p.store.empty() && (o.master_addr.empty() || o.master_port == 0)) {
    return InvalidArgument("MASTER_ADDR and MASTER_PORT must be set (rank 0 serves the rendezvous there)");
  }
  o.socket_ifname = env("CHORUS_SOCKET_IFNAME").value_or("");
  return o;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  Result<PerfOptions> parsed = ParseFlags(args);
  if (!parsed.ok()) {
    std::cerr << "chorus_perf: " << parsed.status().message() << "\n";
    return 1;
  }
  PerfOptions p = parsed.value();
  if (p.help) {
    std::cout << UsageText();
    return 0;
  }
  Result<BackendOptions> bopts = OptionsFromEnv(p, ProcessEnv());
  if (!bopts.ok()) {
    std::cerr << "chorus_perf: " << bopts.status().message() << "\n";
    return 1;
  }
  if (bopts->rank >= 0) SetLogRank(bopts->rank);
  Result<std::unique_ptr<Backend>> backend = CreateBackend(p.backend);
  if (!backend.ok()) {
    std::cerr << "chorus_perf: " << backend.status().message() << "\n";
    return 1;
  }
  // Refuse an unsupported dtype/op (or buffer kind) before joining, so every rank fails
  // at once with the same message instead of one rank leaving its peers stuck in the
  // rendezvous.
  if (backend.value()->requires_device_buffers()) p.device = true;
  if (p.device && !backend.value()->accepts_device_buffers()) {
    std::cerr << "chorus_perf: --device: backend " << p.backend << " takes host buffers only\n";
    return 1;
  }
  if (p.device) {
    Status dev = kernels::cuda::DeviceStatus();
    if (!dev.ok()) {
      std::cerr << "chorus_perf: --device (backend " << p.backend << "): " << dev.message() << "\n";
      return 1;
    }
  }
  bopts->stream_order = p.device && !p.blocking;
  Status st = backend.value()->Supports(p.coll, p.dtype, p.op);
  if (!st.ok()) {
    std::cerr << "chorus_perf: " << st.ToString() << "\n";
    return 1;
  }
  st = backend.value()->Init(bopts.value());
  if (!st.ok()) {
    std::cerr << "chorus_perf: " << p.backend << " init failed: " << st.ToString() << "\n";
    return 1;
  }
  SetLogRank(backend.value()->rank());
  Result<RunSummary> summary = RunBenchmark(*backend.value(), p, std::cout);
  if (!summary.ok()) {
    std::cerr << "chorus_perf: rank " << backend.value()->rank() << ": " << summary.status().ToString() << "\n";
    return 1;
  }
  // A closing barrier so that rank 0 (which serves gloo's rendezvous) leaves last.
  (void)backend.value()->Barrier();
  return summary->total_wrong == 0 ? 0 : 2;
}

}  // namespace
}  // namespace perf
}  // namespace chorus

int main(int argc, char** argv) { return chorus::perf::Main(argc, argv); }
