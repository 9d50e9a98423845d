#include "tools/perf/collectives.h"

#include <algorithm>
#include <cctype>

namespace chorus {
namespace perf {

const std::vector<Collective>& AllCollectives() {
  static const std::vector<Collective> all = {
      Collective::kAllReduce,     Collective::kBroadcast, Collective::kReduce,   Collective::kAllGather,
      Collective::kReduceScatter, Collective::kAllToAll,  Collective::kSendRecv, Collective::kBarrier,
      Collective::kGather,        Collective::kScatter,
  };
  return all;
}

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kBarrier: return "barrier";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
  }
  return "invalid-collective";
}

Result<Collective> ParseCollective(const std::string& name) {
  auto squash = [](const std::string& s) {
    std::string out;
    for (char ch : s) {
      if (ch != '_' && ch != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    return out;
  };
  const std::string want = squash(name);
  std::string known;
  for (Collective c : AllCollectives()) {
    if (squash(CollectiveName(c)) == want) return c;
    known += (known.empty() ? "" : ", ") + std::string(CollectiveName(c));
  }
  return InvalidArgument("unknown collective '" + name + "' (expected one of " + known + ")");
}

bool HasReduceOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

bool HasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

double BusBwFactor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kGather:
    case Collective::kScatter: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv: return 1.0;
    case Collective::kBarrier: return 0.0;
  }
  return 0.0;
}

CollShape ShapeFor(Collective c, size_t requested_bytes, DataType dtype, int nranks, int rank) {
  const size_t elt = DataTypeSize(dtype);
  const size_t n = static_cast<size_t>(std::max(nranks, 1));
  const size_t total = std::max<size_t>(requested_bytes / elt, 1);
  // Per-rank block for the collectives whose large buffer is split in n blocks.
  const size_t block = std::max<size_t>(total / n, 1);
  const size_t r = static_cast<size_t>(rank);
  CollShape s;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv: s.send_count = s.recv_count = s.param_count = total; break;
    case Collective::kAllGather:
    case Collective::kGather:
      s.send_count = block;
      s.recv_count = block * n;
      s.param_count = block;
      s.inplace_send_offset = r * block;  // own block of the output
      break;
    case Collective::kReduceScatter:
    case Collective::kScatter:
      s.send_count = block * n;
      s.recv_count = block;
      s.param_count = block;
      s.inplace_recv_offset = r * block;  // own block of the input
      break;
    case Collective::kAllToAll:
      s.send_count = s.recv_count = block * n;
      s.param_count = block;  // elements per peer
      break;
    case Collective::kBarrier: return s;  // no payload
  }
  s.bytes = std::max(s.send_count, s.recv_count) * elt;
  return s;
}

}  // namespace perf
}  // namespace chorus
