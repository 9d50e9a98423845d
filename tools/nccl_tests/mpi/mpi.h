/* A minimal MPI for running nccl-tests (MPI=1) over chorus, without an MPI installed:
 * exactly the calls, types and ops nccl-tests uses, on host buffers, over one chorus
 * Communicator per MPI_Comm (docs/design/nccl_api.md, "nccl-tests"). Ranks meet the
 * way chorus's env:// does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); start them
 * with tools/nccl_tests/launch.sh. Any error prints the call and the rank, then exits
 * with status 1, as MPI's default error handler (MPI_ERRORS_ARE_FATAL) aborts. */
#ifndef CHORUS_TOOLS_NCCL_TESTS_MPI_MPI_H_
#define CHORUS_TOOLS_NCCL_TESTS_MPI_MPI_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Handles are small integers, as in MPICH; 0 is the null handle of each kind, so that a
 * value-initialized handle (nccl-tests' `MPI_Datatype()`) is refused as a null one. */
typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 15
#define MPI_UNDEFINED (-32766)

#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_COMM_WORLD ((MPI_Comm)1)

#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_BYTE ((MPI_Datatype)1)
#define MPI_INT ((MPI_Datatype)2)
#define MPI_LONG ((MPI_Datatype)3)
#define MPI_LONG_LONG ((MPI_Datatype)4)
#define MPI_LONG_LONG_INT MPI_LONG_LONG
#define MPI_INT64_T ((MPI_Datatype)5)
#define MPI_DOUBLE ((MPI_Datatype)6)

#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_SUM ((MPI_Op)1)
#define MPI_MIN ((MPI_Op)2)
#define MPI_MAX ((MPI_Op)3)

#define MPI_IN_PLACE ((void*)-1)

int MPI_Init(int* argc, char*** argv);
int MPI_Finalize(void);
int MPI_Comm_rank(MPI_Comm comm, int* rank);
int MPI_Comm_size(MPI_Comm comm, int* size);
/* color MPI_UNDEFINED: *newcomm = MPI_COMM_NULL. */
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm);
int MPI_Comm_free(MPI_Comm* comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
/* recvbuf is read at the root only. */
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_TOOLS_NCCL_TESTS_MPI_MPI_H_ */
