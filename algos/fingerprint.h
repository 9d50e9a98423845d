// A 64-bit description of a collective call that travels with each of its messages,
// so that ranks calling different collectives (or the same one with a different
// count, dtype, op or root) get an error naming both calls instead of a hang or
// wrong data.
//
// Layout: [63:60] algorithm + 1 (0: not recorded), [59:56] collective, [55:52] dtype,
// [51:48] op, [47:32] root, [31:0] count modulo 2^32. The algorithm is part of it because
// ranks configured differently (CHORUS_ALGO, CHORUS_HOSTID) would otherwise run
// different schedules for the same call and wait for each other until the deadline.
#pragma once

#include <cstdint>
#include <string>

#include "common/types.h"

namespace chorus::algos {

enum class Collective : uint8_t {
  kBarrier = 1,
  kBroadcast,
  kReduce,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
};

const char* CollectiveName(Collective c);
// Broadcast, reduce, gather and scatter: the collectives that take a root.
bool IsRooted(Collective c);

uint64_t Fingerprint(Collective c, size_t count, DataType dtype, ReduceOp op, int root);
// Records the algorithm (an Algorithm value, see selector.h) in a fingerprint.
uint64_t WithAlgorithm(uint64_t fingerprint, int algorithm);
// "all_reduce(count=1024, float32, sum) by ring"; "broadcast(count=7, int8, root=2)".
std::string DescribeFingerprint(uint64_t fingerprint);

}  // namespace chorus::algos
