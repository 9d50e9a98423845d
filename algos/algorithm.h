// The collective algorithms by name: what CHORUS_ALGO forces and the selector returns.
// Its own target so that chorus/config.h can hold a forced algorithm as a type.
#pragma once

#include <string>

#include "common/status.h"

namespace chorus::algos {

enum class Algorithm {
  kRing,               // all_reduce, all_gather, reduce_scatter
  kRecursiveDoubling,  // all_reduce, all_gather (small, power-of-two worlds)
  kTree,               // broadcast, reduce (binomial, pipelined); all_reduce (double binary tree, pipelined)
  kChain,              // broadcast (a chain from the root, pipelined): large messages
  kLinear,             // gather, scatter
  kPairwise,           // all_to_all
  kDissemination,      // barrier; broadcast up to kAgreedBroadcastMaxBytes (in the agreement's rounds)
  kHierarchical,       // all_reduce, broadcast, reduce, all_gather, reduce_scatter over hosts: within, across
  kRabenseifner,       // all_reduce: reduce-scatter by recursive halving, all-gather by doubling
  kScatterAllGather,   // broadcast (van de Geijn: binomial scatter, ring all-gather): large messages, large worlds
  kCudaIpc,            // every collective on device buffers, all ranks on one host (cuda_ipc_collectives.h)
};

const char* AlgorithmName(Algorithm a);
// The names CHORUS_ALGO takes, as the settings table lists them.
std::string ForceableAlgorithmNames();
// One of the forceable algorithms by name (case-insensitive; "rd" for recursive
// doubling); an error naming CHORUS_ALGO, the value and the names allowed.
Result<Algorithm> ParseAlgorithm(const std::string& name);

}  // namespace chorus::algos
