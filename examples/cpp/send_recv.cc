// Blocking point-to-point: Send returns once the data has left this rank's buffer (it
// may be reused); Recv returns once the message is in the caller's buffer. The n-th
// Recv from a peer with a tag receives the n-th Send that peer made with that tag.
//
//   chorusrun --nproc-per-node 2 -- send_recv
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"
#include "chorus/communicator.h"

int main() {
  std::unique_ptr<chorus::Communicator> comm = example::Connect(2);
  const int rank = comm->rank();
  const int size = comm->size();

  // 1. Ping-pong between ranks 0 and 1: rank 0 sends a vector, rank 1 doubles every
  //    element and sends it back. The typed forms take an element count and a dtype.
  std::vector<float> data(1000);
  if (rank == 0) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    CHECK_OK(comm->Send(data.data(), data.size(), chorus::DataType::kFloat32, /*peer=*/1));
    CHECK_OK(comm->Recv(data.data(), data.size(), chorus::DataType::kFloat32, /*peer=*/1));
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != 2.0f * static_cast<float>(i)) example::Fail("pong element " + std::to_string(i) + " is wrong");
    }
  } else if (rank == 1) {
    CHECK_OK(comm->Recv(data.data(), data.size(), chorus::DataType::kFloat32, /*peer=*/0));
    for (float& x : data) x *= 2.0f;
    CHECK_OK(comm->Send(data.data(), data.size(), chorus::DataType::kFloat32, /*peer=*/0));
  }

  // 2. A token passed once around the ring of all ranks, each adding its rank. Rank 0
  //    sends first and receives last; every other rank receives before it sends, so
  //    no two ranks wait on each other.
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  int64_t token = 0;
  const uint32_t kTokenTag = 7;  // keeps the token apart from other messages
  if (rank == 0) {
    CHECK_OK(comm->Send(&token, sizeof(token), right, kTokenTag));
    CHECK_OK(comm->Recv(&token, sizeof(token), left, kTokenTag));
    const int64_t expected = int64_t{size} * (size - 1) / 2;
    if (token != expected) example::Fail("token came back as " + std::to_string(token));
  } else {
    CHECK_OK(comm->Recv(&token, sizeof(token), left, kTokenTag));
    token += rank;
    CHECK_OK(comm->Send(&token, sizeof(token), right, kTokenTag));
  }

  CHECK_OK(comm->Shutdown());  // waits for every rank, then closes connections
  std::printf("rank %d: send_recv ok\n", rank);
  return 0;
}
