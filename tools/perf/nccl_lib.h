// NCCL, loaded at run time (dlopen), so chorus_perf builds and runs where NCCL is not
// installed and says so when --backend nccl is asked for. Only the entry points the
// benchmark calls; the types are NCCL's ABI (nccl.h), declared here without its header.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "common/types.h"

namespace chorus {
namespace perf {

struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;  // ncclComm_t
using NcclResult = int;  // ncclResult_t: 0 = ncclSuccess
using CudaStreamHandle = void*;

// nccl.h's ncclDataType_t / ncclRedOp_t for chorus's types; false where NCCL has none.
bool NcclDataType(DataType t, int* out);
bool NcclRedOp(ReduceOp op, int* out);

class NcclLib {
 public:
  // path: a file name or path for dlopen ("" = libnccl.so.2, found the usual way).
  static Result<std::unique_ptr<NcclLib>> Load(const std::string& path);
  ~NcclLib();
  NcclLib(const NcclLib&) = delete;
  NcclLib& operator=(const NcclLib&) = delete;

  // OK, or an error naming the NCCL call and NCCL's own message.
  Status Check(NcclResult r, const char* what) const;
  std::string version() const;  // "2.21.5"

  NcclResult (*GetUniqueId)(NcclUniqueId*) = nullptr;
  NcclResult (*CommInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  NcclResult (*CommDestroy)(NcclComm) = nullptr;
  NcclResult (*GetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(NcclResult) = nullptr;
  NcclResult (*AllReduce)(const void*, void*, size_t, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*Broadcast)(const void*, void*, size_t, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*Reduce)(const void*, void*, size_t, int, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*AllGather)(const void*, void*, size_t, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*ReduceScatter)(const void*, void*, size_t, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*Send)(const void*, size_t, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*Recv)(void*, size_t, int, int, NcclComm, CudaStreamHandle) = nullptr;
  NcclResult (*GroupStart)() = nullptr;
  NcclResult (*GroupEnd)() = nullptr;

 private:
  NcclLib() = default;
  void* handle_ = nullptr;
};

}  // namespace perf
}  // namespace chorus
