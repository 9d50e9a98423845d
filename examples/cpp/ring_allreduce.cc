// All-reduce written by hand on point-to-point calls: the ring algorithm. The vector is
// cut into one chunk per rank. In n-1 reduce-scatter steps each rank passes a chunk
// to its right neighbour and adds the one arriving from its left into its own copy;
// then each rank holds one chunk summed over all ranks. In n-1 all-gather steps the
// summed chunks travel around the ring once more, overwriting. Each rank sends
// 2*(n-1)/n of the vector in all, whatever n is. Checked against chorus's AllReduce.
//
//   chorusrun --nproc-per-node 3 -- ring_allreduce
#include <cstdio>
#include <vector>

#include "check.h"
#include "chorus/communicator.h"

namespace {

// Chunk c of a vector of `count` elements cut into `n` near-equal chunks: [begin, end).
size_t ChunkBegin(size_t count, int n, int c) { return count * c / n; }

// One ring step: send chunk `send_c` to the right, receive chunk `recv_c` from the left
// into `incoming`. Every rank sends before it receives, so the send must not wait for
// the receive: ISend, then the blocking Recv, then wait for the send.
void RingStep(chorus::Communicator& comm, const std::vector<float>& data, int send_c, int recv_c, float* incoming) {
  const int n = comm.size();
  const int right = (comm.rank() + 1) % n;
  const int left = (comm.rank() + n - 1) % n;
  const size_t s0 = ChunkBegin(data.size(), n, send_c), s1 = ChunkBegin(data.size(), n, send_c + 1);
  const size_t r0 = ChunkBegin(data.size(), n, recv_c), r1 = ChunkBegin(data.size(), n, recv_c + 1);
  chorus::Work send = comm.ISend(data.data() + s0, (s1 - s0) * sizeof(float), right);
  CHECK_OK(comm.Recv(incoming, (r1 - r0) * sizeof(float), left));
  CHECK_OK(send.Wait());
}

void RingAllReduce(chorus::Communicator& comm, std::vector<float>& data) {
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<float> incoming(data.size() / n + 1);
  for (int step = 0; step < n - 1; ++step) {  // reduce-scatter
    const int send_c = (r - step + n) % n;
    const int recv_c = (r - step - 1 + n) % n;
    RingStep(comm, data, send_c, recv_c, incoming.data());
    const size_t begin = ChunkBegin(data.size(), n, recv_c), end = ChunkBegin(data.size(), n, recv_c + 1);
    for (size_t i = begin; i < end; ++i) data[i] += incoming[i - begin];
  }
  // Rank r now holds chunk (r + 1) % n summed over every rank.
  for (int step = 0; step < n - 1; ++step) {  // all-gather
    const int send_c = (r + 1 - step + n) % n;
    const int recv_c = (r - step + n) % n;
    RingStep(comm, data, send_c, recv_c, data.data() + ChunkBegin(data.size(), n, recv_c));
  }
}

}  // namespace

int main() {
  std::unique_ptr<chorus::Communicator> comm = example::Connect(2);
  const int rank = comm->rank();
  const int n = comm->size();

  // 100003 elements: not a multiple of the rank count, so chunks differ in size.
  // Small integers keep the float sums exact, whatever order they are added in.
  std::vector<float> data(100003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((rank + 1) * (i % 5 + 1));
  std::vector<float> reference = data;

  RingAllReduce(*comm, data);
  CHECK_OK(comm->AllReduce(reference.data(), reference.data(), reference.size(), chorus::DataType::kFloat32,
                           chorus::ReduceOp::kSum));

  const float rank_sum = static_cast<float>(n) * static_cast<float>(n + 1) / 2;  // 1 + 2 + ... + n
  for (size_t i = 0; i < data.size(); ++i) {
    const float expected = rank_sum * static_cast<float>(i % 5 + 1);
    if (data[i] != expected || reference[i] != expected) {
      example::Fail("element " + std::to_string(i) + ": ring " + std::to_string(data[i]) + ", AllReduce " +
                    std::to_string(reference[i]) + ", expected " + std::to_string(expected));
    }
  }
  CHECK_OK(comm->Shutdown());
  std::printf("rank %d: ring_allreduce ok (%zu floats over %d ranks)\n", rank, data.size(), n);
  return 0;
}
