// One rank of a job on the MPI shim (tools/nccl_tests/mpi), started by chorusrun: every
// call and handle nccl-tests uses, the way it uses them, checked against the values the
// ranks must get. `mpi_program bad-type|bad-op|before-init` makes one bad call instead
// (mpi_shim_test.sh checks the message and the exit status). Host buffers only.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tools/nccl_tests/mpi/mpi.h"

namespace {

int failures = 0;
int rank = -1;

void Expect(bool ok, const char* what, long long got, long long want) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: %s: got %lld, want %lld\n", rank, what, got, want);
  ++failures;
}
void ExpectEq(const char* what, long long got, long long want) { Expect(got == want, what, got, want); }

// nccl-tests' way of picking a type and an op (a value-initialized handle for "none").
template <typename T>
MPI_Datatype TypeOf() {
  return sizeof(T) == 8 && T(0.5) == 0 ? MPI_LONG_LONG : sizeof(T) == 8 ? MPI_DOUBLE : MPI_Datatype();
}
MPI_Op OpOf(int average) { return average == 1 ? MPI_SUM : average == 2 ? MPI_MIN : average == 3 ? MPI_MAX : MPI_Op(); }

void CheckAllreduce(int n) {
  int i32 = rank + 1;
  int i32_out = 0;
  MPI_Allreduce(&i32, &i32_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ExpectEq("Allreduce INT SUM", i32_out, n * (n + 1) / 2);
  long l[2] = {10L * rank, -rank};
  MPI_Allreduce(MPI_IN_PLACE, l, 2, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  ExpectEq("Allreduce LONG MAX in place [0]", l[0], 10L * (n - 1));
  ExpectEq("Allreduce LONG MAX in place [1]", l[1], 0);
  long long ll = 100 - rank;
  MPI_Allreduce(MPI_IN_PLACE, &ll, 1, TypeOf<long long>(), OpOf(2), MPI_COMM_WORLD);
  ExpectEq("Allreduce LONG_LONG MIN in place", ll, 100 - (n - 1));
  int64_t big = (int64_t{1} << 40) + rank;
  MPI_Allreduce(MPI_IN_PLACE, &big, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  ExpectEq("Allreduce INT64_T MAX in place", big, (int64_t{1} << 40) + n - 1);
  double d = 0.5 * rank;
  MPI_Allreduce(MPI_IN_PLACE, &d, 1, TypeOf<double>(), OpOf(1), MPI_COMM_WORLD);
  Expect(d == 0.25 * n * (n - 1), "Allreduce DOUBLE SUM in place (x4)", static_cast<long long>(4 * d), n * (n - 1));
  int mins[3] = {rank, -rank, 7};
  MPI_Allreduce(MPI_IN_PLACE, mins, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ExpectEq("Allreduce INT MIN [0]", mins[0], 0);
  ExpectEq("Allreduce INT MIN [1]", mins[1], -(n - 1));
  ExpectEq("Allreduce INT MIN [2]", mins[2], 7);
}

void CheckBcastGather(int n) {
  unsigned char id[128];  // an ncclUniqueId's worth of bytes, from the last rank
  for (int i = 0; i < 128; ++i) id[i] = static_cast<unsigned char>(rank == n - 1 ? i * 3 : 0);
  MPI_Bcast(id, sizeof(id), MPI_BYTE, n - 1, MPI_COMM_WORLD);
  for (int i = 0; i < 128; ++i) ExpectEq("Bcast BYTE", id[i], static_cast<unsigned char>(i * 3));
  double x[2] = {rank == 0 ? 1.5 : 0, rank == 0 ? -2.0 : 0};
  MPI_Bcast(x, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  Expect(x[0] == 1.5 && x[1] == -2.0, "Bcast DOUBLE", static_cast<long long>(x[0] * 2), 3);
  MPI_Barrier(MPI_COMM_WORLD);

  // Per-iteration times to rank 0, as nccl-tests gathers them (no receive buffer elsewhere).
  double times[3] = {rank + 0.25, rank + 0.5, rank + 0.75};
  std::vector<double> all(rank == 0 ? 3 * n : 0);
  MPI_Gather(times, 3, MPI_DOUBLE, rank == 0 ? all.data() : nullptr, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  for (int i = 0; rank == 0 && i < 3 * n; ++i) {
    const int from = i / 3;  // the rank whose row this is
    Expect(all[i] == from + 0.25 * (i % 3 + 1), "Gather DOUBLE to 0 (x4)", static_cast<long long>(4 * all[i]),
           4 * from + i % 3 + 1);
  }
  // Device lines, as bytes; then in place at another root.
  char line[16];
  std::snprintf(line, sizeof(line), "rank %d", rank);
  std::vector<char> lines(rank == 0 ? sizeof(line) * n : 0);
  MPI_Gather(line, sizeof(line), MPI_BYTE, rank == 0 ? lines.data() : nullptr, sizeof(line), MPI_BYTE, 0,
             MPI_COMM_WORLD);
  for (int p = 0; rank == 0 && p < n; ++p) {
    char want[16];
    std::snprintf(want, sizeof(want), "rank %d", p);
    Expect(std::strcmp(lines.data() + p * sizeof(line), want) == 0, "Gather BYTE lines", p, p);
  }
  const int root = n - 1;
  std::vector<int> ints(2 * n, -1);
  int mine[2] = {rank, 100 + rank};
  if (rank == root) {
    ints[2 * rank] = rank;
    ints[2 * rank + 1] = 100 + rank;
  }
  MPI_Gather(rank == root ? MPI_IN_PLACE : mine, 2, MPI_INT, ints.data(), 2, MPI_INT, root, MPI_COMM_WORLD);
  for (int i = 0; rank == root && i < 2 * n; ++i) ExpectEq("Gather INT in place", ints[i], i % 2 ? 100 + i / 2 : i / 2);
}

void CheckAllgather(int n) {
  // nccl-tests' host hashes: in place, MPI_DATATYPE_NULL on the send side.
  std::vector<uint64_t> hashes(n, 0);
  hashes[rank] = 0x1234567800000000ULL + rank;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes.data(), sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  for (int p = 0; p < n; ++p) {
    ExpectEq("Allgather in place", static_cast<long long>(hashes[p]),
             static_cast<long long>(0x1234567800000000ULL + p));
  }
  int mine = 7 * rank;
  std::vector<int> all(n, -1);
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int p = 0; p < n; ++p) ExpectEq("Allgather INT", all[p], 7 * p);
}

void CheckSplit(int n) {
  // By parity, ordered by descending world rank (key -rank).
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
  int hr = -1, hn = -1;
  MPI_Comm_size(half, &hn);
  MPI_Comm_rank(half, &hr);
  const int want_n = (n - rank % 2 + 1) / 2;
  ExpectEq("split size", hn, want_n);
  ExpectEq("split rank (descending)", hr, want_n - 1 - rank / 2);
  int sum = rank;
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, half);
  int want_sum = 0;
  for (int p = rank % 2; p < n; p += 2) want_sum += p;
  ExpectEq("Allreduce on the split", sum, want_sum);
  int from_first = hr == 0 ? 1000 + rank : 0;
  MPI_Bcast(&from_first, 1, MPI_INT, 0, half);
  ExpectEq("Bcast on the split", from_first, 1000 + (rank % 2 == 0 ? 2 * (want_n - 1) : 2 * (want_n - 1) + 1));
  MPI_Barrier(half);
  MPI_Comm_free(&half);
  ExpectEq("Comm_free sets MPI_COMM_NULL", half, MPI_COMM_NULL);

  // Rank 0 in no group; the others in one, ordered by world rank.
  MPI_Comm rest;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 5, rank, &rest);
  if (rank == 0) {
    ExpectEq("MPI_UNDEFINED gives MPI_COMM_NULL", rest, MPI_COMM_NULL);
  } else {
    int rr = -1, rn = -1;
    MPI_Comm_rank(rest, &rr);
    MPI_Comm_size(rest, &rn);
    ExpectEq("split without rank 0: size", rn, n - 1);
    ExpectEq("split without rank 0: rank", rr, rank - 1);
    MPI_Comm_free(&rest);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "all";
  if (std::strcmp(mode, "before-init") == 0) MPI_Barrier(MPI_COMM_WORLD);
  MPI_Init(&argc, &argv);
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* env_rank = std::getenv("RANK");
  const char* env_size = std::getenv("WORLD_SIZE");
  ExpectEq("Comm_rank vs RANK", rank, env_rank ? std::atoi(env_rank) : -1);
  ExpectEq("Comm_size vs WORLD_SIZE", n, env_size ? std::atoi(env_size) : -1);
  if (std::strcmp(mode, "bad-type") == 0) {
    long long v = 1;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, TypeOf<float>(), MPI_SUM, MPI_COMM_WORLD);  // MPI_Datatype()
  } else if (std::strcmp(mode, "bad-op") == 0) {
    int v = 1;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, OpOf(0), MPI_COMM_WORLD);  // MPI_Op()
  }
  CheckAllreduce(n);
  CheckBcastGather(n);
  CheckAllgather(n);
  CheckSplit(n);
  MPI_Finalize();
  if (failures != 0) return 1;
  std::printf("rank %d of %d: mpi shim ok\n", rank, n);
  return 0;
}
