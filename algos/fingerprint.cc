#include "algos/fingerprint.h"

#include "algos/selector.h"

namespace chorus::algos {

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kBarrier: return "barrier";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "unknown-collective";
}

bool IsRooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

uint64_t Fingerprint(Collective c, size_t count, DataType dtype, ReduceOp op, int root) {
  return (uint64_t{static_cast<uint8_t>(c)} << 56) | (uint64_t{static_cast<uint8_t>(dtype)} & 0xf) << 52 |
         (uint64_t{static_cast<uint8_t>(op)} & 0xf) << 48 | (static_cast<uint64_t>(root) & 0xffff) << 32 |
         (count & 0xffffffffull);
}

uint64_t WithAlgorithm(uint64_t fingerprint, int algorithm) {
  return (fingerprint & ~(uint64_t{0xf} << 60)) | (static_cast<uint64_t>(algorithm + 1) & 0xf) << 60;
}

std::string DescribeFingerprint(uint64_t fp) {
  if (fp == 0) return "point-to-point message";
  const int algorithm = static_cast<int>(fp >> 60) - 1;
  const std::string by = algorithm >= 0 ? std::string(" by ") + AlgorithmName(static_cast<Algorithm>(algorithm)) : "";
  auto c = static_cast<Collective>((fp >> 56) & 0xf);
  auto dtype = static_cast<DataType>((fp >> 52) & 0xf);
  auto op = static_cast<ReduceOp>((fp >> 48) & 0xf);
  int root = static_cast<int>((fp >> 32) & 0xffff);
  uint64_t count = fp & 0xffffffffull;
  std::string s = std::string(CollectiveName(c)) + "(count=" + std::to_string(count);
  if (c == Collective::kBarrier) return std::string(CollectiveName(c)) + "()" + by;
  s += std::string(", ") + DataTypeName(dtype);
  if (c == Collective::kReduce || c == Collective::kAllReduce || c == Collective::kReduceScatter) {
    s += std::string(", ") + ReduceOpName(op);
  }
  if (IsRooted(c)) s += ", root=" + std::to_string(root);
  return s + ")" + by;
}

}  // namespace chorus::algos
