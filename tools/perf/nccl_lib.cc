#include "tools/perf/nccl_lib.h"

#include <dlfcn.h>

namespace chorus {
namespace perf {

bool NcclDataType(DataType t, int* out) {
  switch (t) {
    case DataType::kInt8: *out = 0; return true;
    case DataType::kUint8: *out = 1; return true;
    case DataType::kInt32: *out = 2; return true;
    case DataType::kInt64: *out = 4; return true;
    case DataType::kFloat16: *out = 6; return true;
    case DataType::kFloat32: *out = 7; return true;
    case DataType::kFloat64: *out = 8; return true;
    case DataType::kBFloat16: *out = 9; return true;
  }
  return false;
}

bool NcclRedOp(ReduceOp op, int* out) {
  switch (op) {
    case ReduceOp::kSum: *out = 0; return true;
    case ReduceOp::kProd: *out = 1; return true;
    case ReduceOp::kMax: *out = 2; return true;
    case ReduceOp::kMin: *out = 3; return true;
    case ReduceOp::kAvg: *out = 4; return true;  // NCCL >= 2.10
  }
  return false;
}

namespace {

template <typename Fn>
Status Resolve(void* handle, const char* name, const std::string& lib, Fn* fn) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) return Unavailable(lib + " has no " + name + " (NCCL too old?)");
  *fn = reinterpret_cast<Fn>(sym);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<NcclLib>> NcclLib::Load(const std::string& path) {
  const std::string lib = path.empty() ? "libnccl.so.2" : path;
  std::unique_ptr<NcclLib> n(new NcclLib());
  n->handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n->handle_ == nullptr) {
    const char* why = dlerror();
    return Unavailable("NCCL not found: dlopen(" + lib + ") failed: " + (why ? why : "unknown error") +
                       " (install NCCL or point --nccl-lib / CHORUS_PERF_NCCL_LIB at libnccl.so.2)");
  }
  void* h = n->handle_;
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclGetUniqueId", lib, &n->GetUniqueId));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclCommInitRank", lib, &n->CommInitRank));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclCommDestroy", lib, &n->CommDestroy));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclGetVersion", lib, &n->GetVersion));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclGetErrorString", lib, &n->GetErrorString));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclAllReduce", lib, &n->AllReduce));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclBroadcast", lib, &n->Broadcast));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclReduce", lib, &n->Reduce));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclAllGather", lib, &n->AllGather));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclReduceScatter", lib, &n->ReduceScatter));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclSend", lib, &n->Send));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclRecv", lib, &n->Recv));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclGroupStart", lib, &n->GroupStart));
  CHORUS_RETURN_IF_ERROR(Resolve(h, "ncclGroupEnd", lib, &n->GroupEnd));
  return n;
}

NcclLib::~NcclLib() {
  // Not dlclose'd: NCCL's own threads and atexit handlers may still refer to it.
}

Status NcclLib::Check(NcclResult r, const char* what) const {
  if (r == 0) return Status::Ok();
  return InternalError(std::string("NCCL ") + what + " failed: " + GetErrorString(r) + " (ncclResult " +
                       std::to_string(r) + ")");
}

std::string NcclLib::version() const {
  int v = 0;
  if (GetVersion(&v) != 0) return "unknown";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch (>= 2.9), older major*1000 + minor*100 + patch.
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? (v / 100) % 100 : (v / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

}  // namespace perf
}  // namespace chorus
