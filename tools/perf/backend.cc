#include "tools/perf/backend.h"

#include <map>
#include <mutex>

namespace chorus {
namespace perf {

Status Backend::NotImplemented(const char* what) const {
  return Unavailable("backend '" + name() + "' does not implement " + what);
}

Status Backend::AllReduce(const void*, void*, size_t, DataType, ReduceOp) { return NotImplemented("all_reduce"); }
Status Backend::Broadcast(const void*, void*, size_t, DataType, int) { return NotImplemented("broadcast"); }
Status Backend::Reduce(const void*, void*, size_t, DataType, ReduceOp, int) { return NotImplemented("reduce"); }
Status Backend::AllGather(const void*, void*, size_t, DataType) { return NotImplemented("all_gather"); }
Status Backend::ReduceScatter(const void*, void*, size_t, DataType, ReduceOp) {
  return NotImplemented("reduce_scatter");
}
Status Backend::AllToAll(const void*, void*, size_t, DataType) { return NotImplemented("all_to_all"); }
Status Backend::SendRecv(const void*, int, void*, int, size_t, DataType) { return NotImplemented("sendrecv"); }
Status Backend::Gather(const void*, void*, size_t, DataType, int) { return NotImplemented("gather"); }
Status Backend::Scatter(const void*, void*, size_t, DataType, int) { return NotImplemented("scatter"); }

Status RunCollective(Backend& b, Collective coll, const CallArgs& a) {
  switch (coll) {
    case Collective::kAllReduce: return b.AllReduce(a.send, a.recv, a.count, a.dtype, a.op);
    case Collective::kBroadcast: return b.Broadcast(a.send, a.recv, a.count, a.dtype, a.root);
    case Collective::kReduce: return b.Reduce(a.send, a.recv, a.count, a.dtype, a.op, a.root);
    case Collective::kAllGather: return b.AllGather(a.send, a.recv, a.count, a.dtype);
    case Collective::kReduceScatter: return b.ReduceScatter(a.send, a.recv, a.count, a.dtype, a.op);
    case Collective::kAllToAll: return b.AllToAll(a.send, a.recv, a.count, a.dtype);
    case Collective::kSendRecv: {
      const int n = b.size();
      return b.SendRecv(a.send, (b.rank() + 1) % n, a.recv, (b.rank() - 1 + n) % n, a.count, a.dtype);
    }
    case Collective::kBarrier: return b.Barrier();
    case Collective::kGather: return b.Gather(a.send, a.recv, a.count, a.dtype, a.root);
    case Collective::kScatter: return b.Scatter(a.send, a.recv, a.count, a.dtype, a.root);
  }
  return InvalidArgument("invalid collective");
}

namespace {
std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, BackendFactory>& Registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}
}  // namespace

bool RegisterBackend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().emplace(name, std::move(factory)).second;
}

std::vector<std::string> RegisteredBackends() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> names;
  for (const auto& kv : Registry()) names.push_back(kv.first);
  return names;
}

Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name) {
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : RegisteredBackends()) known += (known.empty() ? "" : ", ") + n;
    return Unavailable("backend '" + name + "' is not built into this chorus_perf (available: " + known + ")");
  }
  return factory();
}

}  // namespace perf
}  // namespace chorus
