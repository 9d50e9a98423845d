// Hierarchical all-gather for ranks spread over hosts running L ranks each: the network
// carries each block once to each other host (per host pair, a host's data once, as
// the flat ring's (n-1)/n), over all L of a host's connections at once.
//
// Rank r's block lies at r*count of recv wherever r's host is; rank i of its host
// (a "rail": the ranks with local index i, one per host) carries its own block, 1/L
// of its host's data:
//   1. all-gather within the host: the host's L blocks (shared memory);
//   2. all-gather among rail i across hosts: every host's block i;
//   3. all-gather within the host, once per other host h: the L blocks of h, rank i
//      of this host giving h's block i (blocks of a host need not be contiguous:
//      each ring writes its blocks straight to their places in recv).
// Hosts with different numbers of ranks have no rails: the selector does not offer it.
#include <string>
#include <vector>

#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/group.h"
#include "common/types.h"

namespace chorus::algos {

Status AllGatherHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                             DataType dtype, const Tuning& tuning) {
  const int me = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, "all_gather"));
  if (!topo.even()) {
    return InvalidArgument("hierarchical all_gather needs as many ranks on every host; rank " + std::to_string(me) +
                           " has " + topo.Describe());
  }
  if (count == 0) return Status::Ok();
  const size_t es = DataTypeSize(dtype);
  const std::vector<int>& host = topo.hosts[topo.host_of[me]];
  const int local_size = static_cast<int>(host.size()), i = topo.local_index[me];
  const auto block_of = [count](int rank) { return Span{static_cast<size_t>(rank) * count, count}; };
  char* out = static_cast<char*>(recv);

  GroupTransport local(ctx.transport, host);
  const Context lctx = Within(ctx, local);
  // 1. This host's blocks (our own from send, in place or not).
  if (local_size > 1) {
    CHORUS_RETURN_IF_ERROR(AllGatherRingBlocks(
        lctx, send, recv, es, [&](int j) { return block_of(host[j]); }, tuning));
  } else {
    CopyIfDistinct(out + block_of(me).offset * es, send, count * es);
  }
  if (topo.num_hosts() < 2) return Status::Ok();
  // 2. Every host's block i, our own now in recv.
  const std::vector<int> rail = topo.Rail(i);
  GroupTransport across(ctx.transport, rail);
  CHORUS_RETURN_IF_ERROR(AllGatherRingBlocks(
      Within(ctx, across), out + block_of(me).offset * es, recv, es, [&](int k) { return block_of(rail[k]); }, tuning));
  // 3. Every other host's blocks, from the rails of this host.
  if (local_size < 2) return Status::Ok();
  for (int h = 0; h < topo.num_hosts(); ++h) {
    if (h == topo.host_of[me]) continue;
    const std::vector<int>& theirs = topo.hosts[h];
    CHORUS_RETURN_IF_ERROR(AllGatherRingBlocks(
        lctx, out + block_of(theirs[i]).offset * es, recv, es, [&](int j) { return block_of(theirs[j]); }, tuning));
  }
  return Status::Ok();
}

}  // namespace chorus::algos
