// Hierarchical reduce for ranks spread over several hosts: the network carries the
// buffer once from each other host, and shared memory gathers it within each host.
//
// Each host has a bridge, as the hierarchical broadcast's: the root on the root's host;
// elsewhere the rank with the root's local index where hosts run as many ranks each
// (so that successive roots use different connections), else the host's first rank.
//   1. reduce within every host to its bridge (the host's sum, in scratch but at the
//      root, where it is recv);
//   2. reduce among the bridges, one a host, to the root.
// Both by the binomial tree, the one flat reduce there is, segment by segment
// (kHierarchicalSegmentChunks chunks each), so that a host's next segment is reduced
// to its bridge while the bridge sends this one across.
// AVG sums in both steps and the root divides once by the world size.
// The world's ranks agree on the call before this runs (Dispatch: AgreeOnCall), so
// ranks that disagree on the root fail on every rank before any data moves.
#include <algorithm>
#include <string>
#include <vector>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/group.h"
#include "common/types.h"
#include "kernels/reduce.h"

namespace chorus::algos {

Status ReduceHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                          DataType dtype, ReduceOp op, int root, const Tuning& tuning) {
  const int me = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, "reduce", root));
  const int root_host = topo.host_of[root], my_host = topo.host_of[me];
  const std::vector<int> bridges = topo.Bridges(root);
  const int bridge = bridges[my_host];
  const std::vector<int>& host = topo.hosts[my_host];
  const bool alone = host.size() < 2;
  const bool crosses = topo.num_hosts() > 1 && me == bridge;
  const ReduceOp sum_op = kernels::ElementwiseOp(op);  // AVG: summed here, divided once below
  GroupTransport across(ctx.transport, bridges), local(ctx.transport, host);
  const Context actx = Within(ctx, across), lctx = Within(ctx, local);
  const size_t es = DataTypeSize(dtype), segment = std::min(count, HierarchicalSegmentElems(tuning.chunk_bytes, es));
  // A bridge other than the root sums its host's segment here before sending it on.
  BufferCache::Buffer host_sum =
      me == bridge && me != root && !alone ? ctx.Scratch(segment * es) : BufferCache::Buffer();
  for (size_t first = 0, n = 0; first < count; first += n) {
    n = std::min(segment, count - first);
    const char* in = At(send, first, es);
    char* out = me == root ? At(recv, first, es) : host_sum.data();
    // 1. This host's sum at its bridge (a host of one: its input as it is).
    if (!alone) {
      CHORUS_RETURN_IF_ERROR(
          ReduceTree(lctx, in, me == bridge ? out : nullptr, n, dtype, sum_op, topo.local_index[bridge], tuning));
    } else if (me == root) {
      CopyIfDistinct(out, in, n * es);
    }
    // 2. The hosts' sums at the root.
    if (crosses) {
      CHORUS_RETURN_IF_ERROR(
          ReduceTree(actx, alone ? in : out, me == root ? out : nullptr, n, dtype, sum_op, root_host, tuning));
    }
    if (me == root && op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, out, n, ctx.size()));
  }
  return Status::Ok();
}

}  // namespace chorus::algos
