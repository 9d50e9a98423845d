/* A C program on chorus's nccl.h and libnccl.so.2: one rank, host buffers. */
#include <stdio.h>
#include <string.h>

#include "nccl/nccl.h"
#include "tests/nccl/check.h"

int main(void) {
  int version = 0;
  ncclUniqueId id;
  ncclComm_t comm = NCCL_COMM_NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  float send[4] = {1, 2, 3, 4};
  float recv[4];
  int i;
  CHECK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE || version != 21803) {
    fprintf(stderr, "version %d\n", version);
    return 1;
  }
  version = 0;
  CHECK(pncclGetVersion(&version)); /* the profiling interface's name, same function */
  if (version != NCCL_VERSION_CODE) {
    fprintf(stderr, "pncclGetVersion gave %d\n", version);
    return 1;
  }
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config));
  CHECK(ncclAllReduce(send, recv, 4, ncclFloat, ncclSum, comm, (cudaStream_t)0));
  for (i = 0; i < 4; ++i) {
    if (recv[i] != send[i]) {
      fprintf(stderr, "recv[%d] = %f\n", i, recv[i]);
      return 1;
    }
  }
  if (ncclAllReduce(send, recv, 4, ncclNumTypes, ncclSum, comm, (cudaStream_t)0) != ncclInvalidArgument) return 1;
  if (strstr(ncclGetLastError(comm), "datatype") == NULL) return 1;
  CHECK(ncclCommDestroy(comm));
  printf("c program ok: version %d\n", version);
  return 0;
}
