// Hierarchical reduce-scatter for ranks spread over hosts running L ranks each: as the
// flat ring, the network carries each block once per pair of hosts, but over all L of
// a host's connections at once.
//
// Rank r's block lies at r*count of send wherever r's host is. Rank i of its host
// carries the blocks of its rail (the ranks with local index i, one per host), 1/L of
// the buffer:
//   1. reduce-scatter within the host, once per host h: rank i sums over its host the
//      block of h's rank i, into slot h of a scratch buffer (H blocks);
//   2. reduce-scatter among rail i across hosts over those slots: each rank ends with
//      its own block, reduced over every host, in recv.
// AVG sums in both steps and divides once at the end by the world size.
// Hosts with different numbers of ranks have no rails: the selector does not offer it.
#include <string>
#include <vector>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/group.h"
#include "common/types.h"
#include "kernels/reduce.h"

namespace chorus::algos {

Status ReduceScatterHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                                 DataType dtype, ReduceOp op, const Tuning& tuning) {
  const int me = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, "reduce_scatter"));
  if (!topo.even()) {
    return InvalidArgument("hierarchical reduce_scatter needs as many ranks on every host; rank " + std::to_string(me) +
                           " has " + topo.Describe());
  }
  const size_t es = DataTypeSize(dtype);
  const int my_host = topo.host_of[me], hosts = topo.num_hosts(), i = topo.local_index[me];
  const std::vector<int>& host = topo.hosts[my_host];
  const int local_size = static_cast<int>(host.size());
  const auto block_of = [count](int rank) { return Span{static_cast<size_t>(rank) * count, count}; };
  const ReduceOp sum_op = kernels::ElementwiseOp(op);  // AVG: summed here, divided once below
  const std::vector<int> rail = topo.Rail(i);

  GroupTransport local(ctx.transport, host), across(ctx.transport, rail);
  const Context lctx = Within(ctx, local), actx = Within(ctx, across);
  if (hosts < 2 || local_size < 2) {
    // One step only: the host's ring, or the rail's, straight from send to recv.
    const bool one_host = hosts < 2;
    const std::vector<int>& ranks = one_host ? host : rail;
    if (ranks.size() < 2) {
      CopyIfDistinct(recv, send, count * es);
    } else {
      CHORUS_RETURN_IF_ERROR(ReduceScatterRingBlocks(
          one_host ? lctx : actx, send, recv, dtype, sum_op, [&](int j) { return block_of(ranks[j]); }, tuning));
    }
  } else {
    // 1. Slot h: the block of host h's rank i, summed over this host.
    BufferCache::Buffer partial = ctx.Scratch(static_cast<size_t>(hosts) * count * es);
    for (int h = 0; h < hosts; ++h) {
      const std::vector<int>& theirs = topo.hosts[h];
      CHORUS_RETURN_IF_ERROR(ReduceScatterRingBlocks(
          lctx, send, partial.data() + h * count * es, dtype, sum_op, [&](int j) { return block_of(theirs[j]); },
          tuning));
    }
    // 2. Our own block (slot my_host) summed over the rail's hosts, into recv.
    const auto slot = [count](int k) { return Span{static_cast<size_t>(k) * count, count}; };
    CHORUS_RETURN_IF_ERROR(ReduceScatterRingBlocks(actx, partial.data(), recv, dtype, sum_op, slot, tuning));
  }
  if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, recv, count, ctx.size()));
  return Status::Ok();
}

}  // namespace chorus::algos
