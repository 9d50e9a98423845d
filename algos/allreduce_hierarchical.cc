// Hierarchical all-reduce for ranks spread over several hosts, each running the same
// number of ranks L: the network carries each byte once per host instead of the flat
// ring's 2(n-1)/n, and every rank of a host carries its own slice, so all of the host's
// connections work at once.
//
// With the buffer cut into L blocks of b = count / L elements, rank i of its host:
//   1. reduce-scatter within the host (shared memory): block i, summed over the host;
//   2. all-reduce of block i across hosts, among the ranks with local index i (a "rail",
//      one rank per host): block i is now complete;
//   3. all-gather within the host: every block, everywhere.
// The count % L elements left over go through one small all-reduce over the whole world.
// AVG sums in 1 and 2 and divides block i once, before 3 (as the flat algorithms do:
// a mean of means would round integers twice).
//
// Hosts with different numbers of ranks have no rails; there each host's first rank
// leads:
//   1. reduce within the host to its leader;
//   2. all-reduce among the leaders (the network carries S per host and direction);
//   3. broadcast within the host from its leader.
#include "algos/algorithm.h"
#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/cost_model.h"
#include "algos/group.h"
#include "common/types.h"
#include "kernels/reduce.h"

namespace chorus::algos {

namespace {

// An all-reduce in place among the ranks of `group`, one per host, each host's link
// shared by `sharing` of its ranks at once: the flat algorithm the cost model predicts
// fastest there (the default model where the caller gave none).
Status AllReduceAmong(const Context& ctx, GroupTransport& group, void* buf, size_t count, DataType dtype, ReduceOp op,
                      const Tuning& tuning, int sharing) {
  const Context gctx = Within(ctx, group);
  switch (tuning.Model().AcrossHosts(count * DataTypeSize(dtype), group.size(), sharing).first) {
    case Algorithm::kRecursiveDoubling: return AllReduceRecursiveDoubling(gctx, buf, buf, count, dtype, op);
    case Algorithm::kRabenseifner: return AllReduceRabenseifner(gctx, buf, buf, count, dtype, op);
    case Algorithm::kTree: return AllReduceTree(gctx, buf, buf, count, dtype, op, tuning);
    default: return AllReduceRing(gctx, buf, buf, count, dtype, op, tuning);
  }
}

// The same over leaders, for hosts of different sizes.
Status AllReduceByLeaders(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                          DataType dtype, ReduceOp op, const Tuning& tuning) {
  const std::vector<int>& host = topo.hosts[topo.host_of[ctx.rank()]];
  const ReduceOp sum_op = kernels::ElementwiseOp(op);
  GroupTransport local(ctx.transport, host);
  const Context lctx = Within(ctx, local);
  // 1. This host's sum, at its leader (local rank 0).
  if (host.size() > 1) {
    CHORUS_RETURN_IF_ERROR(ReduceTree(lctx, send, recv, count, dtype, sum_op, 0, tuning));
  } else {
    CopyIfDistinct(recv, send, count * DataTypeSize(dtype));
  }
  // 2. The leaders' sum, in place at each of them.
  if (topo.local_index[ctx.rank()] == 0) {
    std::vector<int> leaders;
    for (const auto& h : topo.hosts) leaders.push_back(h[0]);
    GroupTransport across(ctx.transport, leaders);
    CHORUS_RETURN_IF_ERROR(AllReduceAmong(ctx, across, recv, count, dtype, sum_op, tuning, 1));
    if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, recv, count, ctx.size()));
  }
  // 3. From each leader to its host.
  if (host.size() > 1) CHORUS_RETURN_IF_ERROR(BroadcastTree(lctx, recv, recv, count, dtype, 0, tuning));
  return Status::Ok();
}

}  // namespace

Status AllReduceHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                             DataType dtype, ReduceOp op, const Tuning& tuning) {
  const int me = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, "all_reduce"));
  if (!topo.even()) return AllReduceByLeaders(ctx, topo, send, recv, count, dtype, op, tuning);
  const std::vector<int>& host = topo.hosts[topo.host_of[me]];
  const int local_size = static_cast<int>(host.size()), i = topo.local_index[me];
  const size_t esz = DataTypeSize(dtype), b = count / local_size, tail = count - b * local_size;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  char* mine = out + i * b * esz;
  const ReduceOp sum_op = kernels::ElementwiseOp(op);  // AVG: summed here, divided once below

  GroupTransport local(ctx.transport, host);
  const Context lctx = Within(ctx, local);
  if (b > 0) {
    // 1. Block i, reduced over this host (in place where send == recv: mine == send + i*b).
    if (local_size > 1) {
      CHORUS_RETURN_IF_ERROR(ReduceScatterRing(lctx, in, mine, b, dtype, sum_op, tuning));
    } else {
      CopyIfDistinct(out, in, b * esz);
    }
    // 2. Block i, reduced over the hosts, in place.
    if (topo.num_hosts() > 1) {
      GroupTransport rail(ctx.transport, topo.Rail(i));
      CHORUS_RETURN_IF_ERROR(AllReduceAmong(ctx, rail, mine, b, dtype, sum_op, tuning, local_size));
    }
    if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, mine, b, ctx.size()));
    // 3. Every block to every rank of the host (in place: mine == out + i*b).
    if (local_size > 1) CHORUS_RETURN_IF_ERROR(AllGatherRing(lctx, mine, out, b, dtype, tuning));
  }
  // 4. The elements that do not split into L blocks.
  if (tail > 0) {
    const size_t at = b * local_size * esz;
    CHORUS_RETURN_IF_ERROR(AllReduceRecursiveDoubling(ctx, in + at, out + at, tail, dtype, op));
  }
  return Status::Ok();
}

}  // namespace chorus::algos
