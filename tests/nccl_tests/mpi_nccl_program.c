/* nccl-tests' start-up on the CPU: the MPI shim and chorus's libnccl.so.2 in one process
 * (each with its own copy of chorus inside). Rank 0 makes the ncclUniqueId, MPI_Bcast
 * hands it on, every rank joins with ncclCommInitRank, then an ncclAllReduce on host
 * buffers (chorus's extension) and an MPI_Allreduce agree on the sums. */
#include <stdio.h>
#include <string.h>

#include "nccl/nccl.h"
#include "tests/nccl/check.h"
#include "tools/nccl_tests/mpi/mpi.h"

int main(int argc, char** argv) {
  int rank = -1, n = 0, i, errors = 0;
  ncclUniqueId id;
  ncclComm_t comm = NCCL_COMM_NULL;
  MPI_Comm mpi_comm;
  float send[4], recv[4];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi_comm);
  memset(&id, 0, sizeof(id));
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_comm);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  for (i = 0; i < 4; ++i) send[i] = (float)(rank + i);
  CHECK(ncclAllReduce(send, recv, 4, ncclFloat, ncclSum, comm, (cudaStream_t)0));
  for (i = 0; i < 4; ++i) {
    const float want = (float)(n * (n - 1) / 2 + n * i);
    if (recv[i] != want) {
      fprintf(stderr, "rank %d: recv[%d] = %f, want %f\n", rank, i, recv[i], want);
      ++errors;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(ncclCommDestroy(comm));
  MPI_Comm_free(&mpi_comm);
  MPI_Finalize();
  if (errors != 0) return 1;
  printf("rank %d of %d: nccl over the mpi shim ok\n", rank, n);
  return 0;
}
