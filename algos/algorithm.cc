#include "algos/algorithm.h"

#include <strings.h>

namespace chorus::algos {
namespace {

// CUDA IPC is chosen by where the buffers are, never forced.
constexpr Algorithm kForceable[] = {
    Algorithm::kRing,         Algorithm::kRecursiveDoubling, Algorithm::kTree,          Algorithm::kChain,
    Algorithm::kLinear,       Algorithm::kPairwise,          Algorithm::kDissemination, Algorithm::kHierarchical,
    Algorithm::kRabenseifner, Algorithm::kScatterAllGather};

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kTree: return "tree";
    case Algorithm::kChain: return "chain";
    case Algorithm::kLinear: return "linear";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kRabenseifner: return "rabenseifner";
    case Algorithm::kScatterAllGather: return "scatter_allgather";
    case Algorithm::kCudaIpc: return "cuda_ipc";
  }
  return "unknown";
}

std::string ForceableAlgorithmNames() {
  std::string names;
  for (Algorithm a : kForceable) {
    if (!names.empty()) names += ", ";
    names += AlgorithmName(a);
    if (a == Algorithm::kRecursiveDoubling) names += " (rd)";
  }
  return names;
}

Result<Algorithm> ParseAlgorithm(const std::string& name) {
  if (strcasecmp(name.c_str(), "rd") == 0) return Algorithm::kRecursiveDoubling;
  for (Algorithm a : kForceable) {
    if (strcasecmp(name.c_str(), AlgorithmName(a)) == 0) return a;
  }
  return InvalidArgument("CHORUS_ALGO='" + name + "' is not an algorithm; allowed: " + ForceableAlgorithmNames());
}

}  // namespace chorus::algos
