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
#include <algorithm>

#include "algos/collectives.h"
#include "algos/group.h"
#include "chorus/types.h"
#include "kernels/reduce.h"

namespace chorus::algos {

Status AllReduceHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                             DataType dtype, ReduceOp op, const Tuning& tuning) {
  const int me = ctx.rank();
  if (!topo.even() || topo.size() != ctx.size()) {
    return InvalidArgument("hierarchical all_reduce needs as many ranks on every host (" + topo.Describe() + ")");
  }
  const std::vector<int>& host = topo.hosts[topo.host_of[me]];
  const int local_size = static_cast<int>(host.size()), i = topo.local_index[me];
  const size_t esz = DataTypeSize(dtype), b = count / local_size, tail = count - b * local_size;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  char* mine = out + i * b * esz;
  const ReduceOp sum_op = kernels::ElementwiseOp(op);  // AVG: summed here, divided once below

  GroupTransport local(ctx.transport, host);
  const Context lctx{local, ctx.seq, ctx.fingerprint, ctx.deadline, nullptr, ctx.scratch};
  if (b > 0) {
    // 1. Block i, reduced over this host (in place where send == recv: mine == send + i*b).
    if (local_size > 1) {
      CHORUS_RETURN_IF_ERROR(ReduceScatterRing(lctx, in, mine, b, dtype, sum_op, tuning));
    } else if (in != out) {
      std::copy(in, in + b * esz, out);
    }
    // 2. Block i, reduced over the hosts, in place.
    if (topo.num_hosts() > 1) {
      GroupTransport rail(ctx.transport, topo.Rail(i));
      const Context rctx{rail, ctx.seq, ctx.fingerprint, ctx.deadline, nullptr, ctx.scratch};
      CHORUS_RETURN_IF_ERROR(b * esz <= tuning.chunk_bytes
                                 ? AllReduceRecursiveDoubling(rctx, mine, mine, b, dtype, sum_op)
                                 : AllReduceRing(rctx, mine, mine, b, dtype, sum_op, tuning));
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
