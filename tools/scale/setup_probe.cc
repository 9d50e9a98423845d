// What creating a world costs each rank: the time to create the communicator (chorus)
// or MPI_Init (Open MPI) and the first barrier, the file descriptors and the memory the
// rank holds after. Rank 0 gathers every rank's numbers and prints one line:
//
//   setup backend=chorus ranks=64 job_ms=... init_ms=max/mean barrier_ms=max/mean
//         cpu_ms=max/mean fds=max/mean rss_mb=max/mean
//
// cpu_ms is the CPU time (all threads) each rank spent from its start to the barrier's
// return: with more ranks than cores the wall times grow with the total work of all
// ranks, while cpu_ms shows how each rank's own work grows with n.
// job_ms runs from the earliest rank's start to the last rank's return from the barrier,
// process start-up included, so both backends are timed alike. Run through chorusrun
// (--backend chorus) or mpirun (--backend mpi); tools/scale/setup_scale.sh runs both.
#include <mpi/mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "common/fd_limit.h"

namespace {

enum class Backend { kChorus, kMpi };

// One rank's numbers, gathered as doubles.
struct Sample {
  double start_ms;    // process start (the first line of main), wall clock
  double init_ms;     // Communicator::Create or MPI_Init
  double barrier_ms;  // the first barrier
  double ready_ms;    // wall clock at the barrier's return
  double fds;         // descriptors open after the barrier
  double rss_mb;      // resident memory after the barrier
  double cpu_ms;      // CPU time of the process, user + system, up to the barrier's return
};
constexpr int kFields = sizeof(Sample) / sizeof(double);

double WallMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SteadyMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// User + system CPU time of this process (every thread) so far.
double CpuMs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// VmRSS of /proc/self/status, MiB.
double RssMb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

void Report(const char* backend, const std::vector<Sample>& all) {
  const auto stat = [&](double Sample::*f, double* max, double* mean) {
    *max = 0;
    *mean = 0;
    for (const Sample& s : all) {
      *max = std::max(*max, s.*f);
      *mean += s.*f / static_cast<double>(all.size());
    }
  };
  double first_start = all[0].start_ms, last_ready = all[0].ready_ms;
  for (const Sample& s : all) {
    first_start = std::min(first_start, s.start_ms);
    last_ready = std::max(last_ready, s.ready_ms);
  }
  double im, ia, bm, ba, cm, ca, fm, fa, rm, ra;
  stat(&Sample::init_ms, &im, &ia);
  stat(&Sample::barrier_ms, &bm, &ba);
  stat(&Sample::cpu_ms, &cm, &ca);
  stat(&Sample::fds, &fm, &fa);
  stat(&Sample::rss_mb, &rm, &ra);
  std::printf(
      "setup backend=%s ranks=%zu job_ms=%.0f init_ms=%.0f/%.0f barrier_ms=%.1f/%.1f cpu_ms=%.0f/%.1f "
      "fds=%.0f/%.1f rss_mb=%.1f/%.1f\n",
      backend, all.size(), last_ready - first_start, im, ia, bm, ba, cm, ca, fm, fa, rm, ra);
}

int RunChorus(Sample s) {
  double t = SteadyMs();
  auto comm = chorus::Communicator::Create(chorus::Options());
  if (!comm.ok()) {
    std::fprintf(stderr, "setup_probe: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  s.init_ms = SteadyMs() - t;
  t = SteadyMs();
  chorus::Status st = (*comm)->Barrier();
  s.barrier_ms = SteadyMs() - t;
  s.ready_ms = WallMs();
  s.cpu_ms = CpuMs();
  s.fds = static_cast<double>(chorus::OpenFdCount());
  s.rss_mb = RssMb();
  const int n = (*comm)->size();
  std::vector<Sample> all(static_cast<size_t>(n));
  if (st.ok()) st = (*comm)->Gather(&s, all.data(), kFields, chorus::DataType::kFloat64, 0);
  if (st.ok() && (*comm)->rank() == 0) Report("chorus", all);
  if (st.ok()) st = (*comm)->Shutdown();
  if (!st.ok()) std::fprintf(stderr, "setup_probe: %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}

int RunMpi(Sample s) {
  double t = SteadyMs();
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return 1;
  s.init_ms = SteadyMs() - t;
  t = SteadyMs();
  MPI_Barrier(MPI_COMM_WORLD);
  s.barrier_ms = SteadyMs() - t;
  s.ready_ms = WallMs();
  s.cpu_ms = CpuMs();
  s.fds = static_cast<double>(chorus::OpenFdCount());
  s.rss_mb = RssMb();
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<Sample> all(static_cast<size_t>(n));
  MPI_Gather(&s, kFields, MPI_DOUBLE, all.data(), kFields, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) Report("mpi", all);
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Sample s{};
  s.start_ms = WallMs();
  Backend b = Backend::kChorus;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "chorus" && v != "mpi") {
        std::fprintf(stderr, "setup_probe: --backend is chorus or mpi, not '%s'\n", v.c_str());
        return 2;
      }
      b = v == "mpi" ? Backend::kMpi : Backend::kChorus;
    } else {
      std::fprintf(stderr, "usage: setup_probe [--backend chorus|mpi]\n");
      return 2;
    }
  }
  return b == Backend::kMpi ? RunMpi(s) : RunChorus(s);
}
