/* A profiler in the style NCCL's profiling interface serves: this program defines its own
 * ncclAllReduce and ncclBroadcast (exported with -rdynamic, so they interpose the
 * library's as an LD_PRELOADed tool's would), counts the calls and forwards them to
 * pncclAllReduce / pncclBroadcast. */
#include <stdio.h>

#include "nccl/nccl.h"

static int all_reduce_calls = 0;
static int broadcast_calls = 0;

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  ++all_reduce_calls;
  return pncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  ++broadcast_calls;
  return pncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

#define CHECK(call)                                                                                \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "%s: %s (%s)\n", #call, pncclGetErrorString(r_), pncclGetLastError(NULL)); \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(void) {
  ncclUniqueId id;
  ncclComm_t comm = NCCL_COMM_NULL;
  int send[3] = {5, 6, 7};
  int recv[3] = {0, 0, 0};
  int i;
  CHECK(pncclGetUniqueId(&id));
  CHECK(pncclCommInitRank(&comm, 1, id, 0));
  /* A forwarding pnccl would call back into this ncclAllReduce and never return. */
  CHECK(ncclAllReduce(send, recv, 3, ncclInt32, ncclSum, comm, (cudaStream_t)0));
  for (i = 0; i < 3; ++i) {
    if (recv[i] != send[i]) {
      fprintf(stderr, "recv[%d] = %d, expected %d\n", i, recv[i], send[i]);
      return 1;
    }
  }
  /* The library's own ncclBcast must not show up as an application ncclBroadcast. */
  CHECK(ncclBcast(recv, 3, ncclInt32, 0, comm, (cudaStream_t)0));
  CHECK(ncclBroadcast(send, recv, 3, ncclInt32, 0, comm, (cudaStream_t)0));
  CHECK(pncclCommDestroy(comm));
  if (all_reduce_calls != 1 || broadcast_calls != 1) {
    fprintf(stderr, "profiler saw %d ncclAllReduce and %d ncclBroadcast calls, expected 1 and 1\n", all_reduce_calls,
            broadcast_calls);
    return 1;
  }
  printf("c profiler ok\n");
  return 0;
}
