// Non-blocking point-to-point: ISend/IRecv start a transfer and return a Work at once;
// the buffers belong to chorus until Wait() (or a true Test()) says it ended. Here every
// rank swaps a halo with both neighbours of a ring, the way a stencil code does, and
// computes in the meantime.
//
//   chorusrun --nproc-per-node 2 -- isend_irecv
#include <cstdio>
#include <numeric>
#include <vector>

#include "check.h"
#include "chorus/communicator.h"

namespace {
// Tags say which way a message travels: with 2 ranks the left and the right neighbour
// are the same rank, and only the tag tells its two messages apart.
constexpr uint32_t kToRight = 1;
constexpr uint32_t kToLeft = 2;
constexpr size_t kHalo = 256;

double HaloValue(int from_rank, uint32_t direction, size_t i) { return from_rank * 1000.0 + direction * 100.0 + i; }
}  // namespace

int main() {
  std::unique_ptr<chorus::Communicator> comm = example::Connect(2);
  const int rank = comm->rank();
  const int size = comm->size();
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;

  std::vector<double> to_right(kHalo), to_left(kHalo), from_left(kHalo), from_right(kHalo);
  for (size_t i = 0; i < kHalo; ++i) {
    to_right[i] = HaloValue(rank, kToRight, i);
    to_left[i] = HaloValue(rank, kToLeft, i);
  }
  const size_t bytes = kHalo * sizeof(double);

  // Post the receives first, then the sends: nothing waits for anything yet.
  chorus::Work recv_left = comm->IRecv(from_left.data(), bytes, left, kToRight);
  chorus::Work recv_right = comm->IRecv(from_right.data(), bytes, right, kToLeft);
  chorus::Work send_right = comm->ISend(to_right.data(), bytes, right, kToRight);
  chorus::Work send_left = comm->ISend(to_left.data(), bytes, left, kToLeft);

  // Work that does not touch the four buffers overlaps with the transfers.
  std::vector<double> interior(1 << 16);
  std::iota(interior.begin(), interior.end(), 0.0);
  const double interior_sum = std::accumulate(interior.begin(), interior.end(), 0.0);

  // Test() never blocks: poll one receive a little, then wait for everything (Wait is
  // bounded by the communicator's timeout, CHORUS_TIMEOUT).
  int polls = 0;
  while (!recv_left.Test() && polls < 100) ++polls;
  CHECK_OK(recv_left.Wait());
  CHECK_OK(recv_right.Wait());
  CHECK_OK(send_right.Wait());
  CHECK_OK(send_left.Wait());

  for (size_t i = 0; i < kHalo; ++i) {
    if (from_left[i] != HaloValue(left, kToRight, i) || from_right[i] != HaloValue(right, kToLeft, i)) {
      example::Fail("halo element " + std::to_string(i) + " is wrong");
    }
  }
  CHECK_OK(comm->Shutdown());
  std::printf("rank %d: isend_irecv ok (interior sum %.0f computed while the halos travelled)\n", rank, interior_sum);
  return 0;
}
