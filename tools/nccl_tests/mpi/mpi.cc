// The minimal MPI of mpi.h over chorus: one Communicator per MPI_Comm, host buffers.
// Every call checks its handles and arguments; a failure is fatal (Fail), as under
// MPI's default error handler, so no caller ever sees an error code.
#include "tools/nccl_tests/mpi/mpi.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "chorus/communicator.h"
#include "common/status.h"
#include "common/types.h"

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;

enum class Phase { kBeforeInit, kRunning, kFinalized };

struct State {
  std::mutex mu;
  Phase phase = Phase::kBeforeInit;
  int world_rank = -1;
  int world_size = 0;
  std::map<MPI_Comm, std::unique_ptr<Communicator>> comms;
  MPI_Comm next_handle = MPI_COMM_WORLD + 1;
};

State& Global() {
  static State* state = new State();  // never destroyed: a failing exit may run anywhere
  return *state;
}

// Prints "<call> on rank R of N: <what>", tells every peer (Abort) and exits 1.
[[noreturn]] void Fail(const char* call, const std::string& what) {
  State& s = Global();
  const std::string where = s.world_rank < 0
                                ? std::string(" (rank not known yet)")
                                : " on rank " + std::to_string(s.world_rank) + " of " + std::to_string(s.world_size);
  const std::string message = std::string(call) + where + ": " + what;
  std::fprintf(stderr, "chorus mpi: %s\n", message.c_str());
  std::fflush(stderr);
  for (auto& [handle, comm] : s.comms) comm->Abort(message);
  std::_Exit(1);
}

void CheckOk(const char* call, const chorus::Status& st) {
  if (!st.ok()) Fail(call, st.ToString());
}

Communicator& Comm(const char* call, MPI_Comm handle) {
  State& s = Global();
  if (s.phase == Phase::kBeforeInit) Fail(call, "called before MPI_Init");
  if (s.phase == Phase::kFinalized) Fail(call, "called after MPI_Finalize");
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.comms.find(handle);
  if (it == s.comms.end()) Fail(call, "communicator " + std::to_string(handle) + " is not a live MPI_Comm");
  return *it->second;
}

struct TypeInfo {
  DataType dtype;
  size_t bytes;
};

TypeInfo Type(const char* call, MPI_Datatype t) {
  static_assert(sizeof(long) == 8 && sizeof(long long) == 8 && sizeof(int) == 4, "LP64 only");
  switch (t) {
    case MPI_BYTE: return {DataType::kUint8, 1};
    case MPI_INT: return {DataType::kInt32, 4};
    case MPI_LONG:
    case MPI_LONG_LONG:
    case MPI_INT64_T: return {DataType::kInt64, 8};
    case MPI_DOUBLE: return {DataType::kFloat64, 8};
    default:
      Fail(call,
           "datatype " + std::to_string(t) +
               " is not one this MPI supports (MPI_BYTE, MPI_INT, MPI_LONG, MPI_LONG_LONG, MPI_INT64_T, MPI_DOUBLE)");
  }
}

ReduceOp Op(const char* call, MPI_Op op) {
  switch (op) {
    case MPI_SUM: return ReduceOp::kSum;
    case MPI_MIN: return ReduceOp::kMin;
    case MPI_MAX: return ReduceOp::kMax;
    default: Fail(call, "op " + std::to_string(op) + " is not one this MPI supports (MPI_SUM, MPI_MIN, MPI_MAX)");
  }
}

size_t Count(const char* call, const char* name, int count) {
  if (count < 0) Fail(call, std::string(name) + " " + std::to_string(count) + " is negative");
  return static_cast<size_t>(count);
}

}  // namespace

extern "C" {

int MPI_Init(int* /*argc*/, char*** /*argv*/) {
  State& s = Global();
  if (s.phase != Phase::kBeforeInit) Fail("MPI_Init", "called twice");
  auto world = Communicator::Create();  // env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  if (!world.ok()) {
    Fail("MPI_Init", world.status().ToString() + " (start the ranks with chorusrun: tools/launcher)");
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.world_rank = (*world)->rank();
  s.world_size = (*world)->size();
  s.comms[MPI_COMM_WORLD] = std::move(world.value());
  s.phase = Phase::kRunning;
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  State& s = Global();
  Comm("MPI_Finalize", MPI_COMM_WORLD);
  // Communicators split off first: the world's store may host their rendezvous.
  std::map<MPI_Comm, std::unique_ptr<Communicator>> comms;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    comms.swap(s.comms);
    s.phase = Phase::kFinalized;
  }
  for (auto it = comms.rbegin(); it != comms.rend(); ++it) CheckOk("MPI_Finalize", it->second->Shutdown());
  return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int* rank) {
  *rank = Comm("MPI_Comm_rank", comm).rank();
  return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int* size) {
  *size = Comm("MPI_Comm_size", comm).size();
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  const char* call = "MPI_Comm_split";
  Communicator& parent = Comm(call, comm);
  if (color < 0 && color != MPI_UNDEFINED) Fail(call, "color " + std::to_string(color) + " is negative");
  auto child = parent.Split(color == MPI_UNDEFINED ? -1 : color, key);
  CheckOk(call, child.status());
  if (child.value() == nullptr) {
    *newcomm = MPI_COMM_NULL;
    return MPI_SUCCESS;
  }
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mu);
  *newcomm = s.next_handle++;
  s.comms[*newcomm] = std::move(child.value());
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm* comm) {
  const char* call = "MPI_Comm_free";
  if (*comm == MPI_COMM_WORLD) Fail(call, "MPI_COMM_WORLD cannot be freed");
  Communicator& c = Comm(call, *comm);
  CheckOk(call, c.Shutdown());
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mu);
  s.comms.erase(*comm);
  *comm = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm comm) {
  CheckOk("MPI_Barrier", Comm("MPI_Barrier", comm).Barrier());
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const char* call = "MPI_Bcast";
  Communicator& c = Comm(call, comm);
  const TypeInfo t = Type(call, datatype);
  CheckOk(call, c.Broadcast(buffer, Count(call, "count", count), t.dtype, root));
  return MPI_SUCCESS;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  const char* call = "MPI_Allreduce";
  Communicator& c = Comm(call, comm);
  const TypeInfo t = Type(call, datatype);
  const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  CheckOk(call, c.AllReduce(send, recvbuf, Count(call, "count", count), t.dtype, Op(call, op)));
  return MPI_SUCCESS;
}

// Gather and Allgather move bytes: the send and receive sides must agree in size.
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const char* call = "MPI_Gather";
  Communicator& c = Comm(call, comm);
  const bool is_root = c.rank() == root;
  if (sendbuf == MPI_IN_PLACE && !is_root) Fail(call, "MPI_IN_PLACE is for the root only");
  size_t bytes = 0;
  if (is_root) bytes = Count(call, "recvcount", recvcount) * Type(call, recvtype).bytes;
  if (sendbuf != MPI_IN_PLACE) {
    const size_t send_bytes = Count(call, "sendcount", sendcount) * Type(call, sendtype).bytes;
    if (is_root && send_bytes != bytes) {
      Fail(call, "sends " + std::to_string(send_bytes) + " bytes but receives " + std::to_string(bytes) + " per rank");
    }
    bytes = send_bytes;
  }
  const void* send = sendbuf == MPI_IN_PLACE ? static_cast<char*>(recvbuf) + c.rank() * bytes : sendbuf;
  CheckOk(call, c.Gather(send, is_root ? recvbuf : nullptr, bytes, DataType::kUint8, root));
  return MPI_SUCCESS;
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = "MPI_Allgather";
  Communicator& c = Comm(call, comm);
  const size_t bytes = Count(call, "recvcount", recvcount) * Type(call, recvtype).bytes;
  const void* send = static_cast<char*>(recvbuf) + c.rank() * bytes;  // MPI_IN_PLACE: this rank's block
  if (sendbuf != MPI_IN_PLACE) {
    const size_t send_bytes = Count(call, "sendcount", sendcount) * Type(call, sendtype).bytes;
    if (send_bytes != bytes) {
      Fail(call, "sends " + std::to_string(send_bytes) + " bytes but receives " + std::to_string(bytes) + " per rank");
    }
    send = sendbuf;
  }
  CheckOk(call, c.AllGather(send, recvbuf, bytes, DataType::kUint8));
  return MPI_SUCCESS;
}

}  // extern "C"
