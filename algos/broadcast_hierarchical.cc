// Hierarchical broadcast for ranks spread over several hosts: the network carries the
// buffer once to each other host, and shared memory spreads it within each host.
//
// Each host has a bridge: the root on the root's host; elsewhere the rank with the
// root's local index where hosts run as many ranks each (so that successive roots use
// different connections), else the host's first rank.
//   1. broadcast among the bridges, one a host, by the flat algorithm the cost model
//      predicts fastest there;
//   2. broadcast within every host from its bridge (the flat algorithm predicted fastest
//      over shared memory).
// Both steps go segment by segment (kHierarchicalSegmentChunks chunks each): a host
// gets the first segment before the whole buffer has crossed, though each bridge, the
// root included, runs a segment's two steps one after the other.
// The world's ranks agree on the call before this runs (Dispatch: AgreeOnCall), so
// ranks that disagree on the root fail on every rank before any data moves.
#include <algorithm>
#include <string>
#include <vector>

#include "algos/algorithm.h"
#include "algos/collectives.h"
#include "algos/cost_model.h"
#include "algos/group.h"
#include "common/types.h"

namespace chorus::algos {

namespace {

// A broadcast among the ranks of `group` from its rank `root`: the flat algorithm the
// cost model predicts fastest for `ranks` ranks across hosts or within one.
Status BroadcastAmong(const Context& ctx, GroupTransport& group, void* buf, size_t count, DataType dtype, int root,
                      const Tuning& tuning, bool across) {
  const Context gctx = Within(ctx, group);
  switch (tuning.Model().BroadcastAmong(count * DataTypeSize(dtype), group.size(), across).first) {
    case Algorithm::kChain: return BroadcastChain(gctx, buf, buf, count, dtype, root, tuning);
    case Algorithm::kScatterAllGather: return BroadcastScatterAllGather(gctx, buf, count, dtype, root, tuning);
    default: return BroadcastTree(gctx, buf, buf, count, dtype, root, tuning);
  }
}

}  // namespace

Status BroadcastHierarchical(const Context& ctx, const Topology& topo, void* buf, size_t count, DataType dtype,
                             int root, const Tuning& tuning) {
  const int me = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckTopology(ctx, topo, "broadcast", root));
  const int root_host = topo.host_of[root], my_host = topo.host_of[me];
  const std::vector<int> bridges = topo.Bridges(root);
  const int bridge = bridges[my_host];
  const std::vector<int>& host = topo.hosts[my_host];
  GroupTransport across(ctx.transport, bridges), local(ctx.transport, host);
  const size_t es = DataTypeSize(dtype), segment = HierarchicalSegmentElems(tuning.chunk_bytes, es);
  for (size_t first = 0, n = 0; first < count; first += n) {
    char* at = static_cast<char*>(buf) + first * es;
    n = std::min(segment, count - first);
    // 1. From the root to one rank of every other host.
    if (topo.num_hosts() > 1 && me == bridge) {
      CHORUS_RETURN_IF_ERROR(BroadcastAmong(ctx, across, at, n, dtype, root_host, tuning, true));
    }
    // 2. From that rank to the rest of its host.
    if (host.size() > 1) {
      CHORUS_RETURN_IF_ERROR(BroadcastAmong(ctx, local, at, n, dtype, topo.local_index[bridge], tuning, false));
    }
  }
  return Status::Ok();
}

}  // namespace chorus::algos
