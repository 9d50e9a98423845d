// Every collective algorithm chorus has, one per file (algos/<name>.cc). Each takes a
// Context (transport, tag space, fingerprint, deadline) and host buffers, reaches
// peers only through ctx.transport, reduces only through kernels/, and returns a
// Status naming what went wrong.
//
// Buffers: `count` is the number of elements of `dtype`. In-place means send == recv
// (for all_gather: send == recv + rank*count elements; for reduce_scatter: recv ==
// send + rank*count elements). Counts of 0 and counts smaller than the world size are
// valid everywhere.
#pragma once

#include <cstddef>
#include <functional>

#include "algos/chunking.h"
#include "algos/context.h"
#include "algos/cost_model.h"
#include "algos/topology.h"
#include "common/types.h"

namespace chorus::algos {

struct Tuning {
  // Pipelining granularity: a chunk is sent, received and reduced as one unit, so
  // that these overlap (CHORUS_CHUNK_BYTES).
  size_t chunk_bytes = 512 << 10;
  // Some host runs more ranks than it has cores (the same on every rank): there a copy
  // costs more than a round trip, so the trees' chunks of kCreditAtBytes and more all
  // wait for their credit instead of going unasked to a peer that may be a call behind.
  bool crowded_cores = false;
  // Hosts x ranks, for the hierarchical algorithms (null: every rank a host of its own).
  const Topology* topology = nullptr;
  // The selector's cost model, by which the hierarchical algorithms pick their steps
  // (null: a default model, TCP's costs).
  const CostModel* model = nullptr;

  // `model`, or the default one where the caller gave none.
  const CostModel& Model() const {
    static const CostModel kDefault;
    return model != nullptr ? *model : kDefault;
  }
};

// all_reduce: ring = reduce-scatter then all-gather, pipelined in chunks.
// 2(n-1) steps, 2(n-1)/n * S bytes sent per rank: bandwidth-optimal for large S.
Status AllReduceRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     const Tuning& tuning);
// all_reduce over hosts: with as many ranks on each, reduce-scatter within each host,
// an all-reduce of each rank's slice across hosts, all-gather within each host; with
// hosts of different sizes, reduce to each host's first rank, all-reduce among those,
// broadcast back. The network carries S per host and direction instead of the flat
// ring's 2(n-1)/n * S.
Status AllReduceHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                             DataType dtype, ReduceOp op, const Tuning& tuning);
// all_reduce: recursive doubling (non-powers of two fold the extra ranks in first).
// log2(n) steps, S*log2(n) bytes: latency-optimal for small S.
Status AllReduceRecursiveDoubling(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op);
// all_reduce: Rabenseifner = reduce-scatter by recursive halving, then all-gather by
// recursive doubling (non-powers of two fold the extra ranks in first). 2 log2(n) steps,
// 2(n-1)/n * S bytes sent per rank (plus the fold's 2 S): for mid sizes on large worlds.
Status AllReduceRabenseifner(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                             ReduceOp op);
// all_reduce: a double binary tree (two mirrored heap-ordered trees, each half of S),
// reduced up and broadcast down at once in chunks: about 2 floor(log2 n) + C - 1 chunk
// times for C chunks, any n; between recursive doubling and the ring on large worlds.
Status AllReduceTree(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     const Tuning& tuning);
// broadcast: binomial tree from root, pipelined in chunks. Out of place (send != buf on
// the root; the others ignore send) the root sends from send and copies each chunk into
// buf while its children receive it.
Status BroadcastTree(const Context& ctx, const void* send, void* buf, size_t count, DataType dtype, int root,
                     const Tuning& tuning);
// broadcast: chain root -> root+1 -> ..., pipelined in chunks (large messages); out of
// place as the tree.
Status BroadcastChain(const Context& ctx, const void* send, void* buf, size_t count, DataType dtype, int root,
                      const Tuning& tuning);
// broadcast: van de Geijn: the root scatters a block to each rank down the binomial tree,
// then a ring all-gathers the blocks (large messages on large worlds, about 2 S/B).
Status BroadcastScatterAllGather(const Context& ctx, void* buf, size_t count, DataType dtype, int root,
                                 const Tuning& tuning);
// broadcast over hosts: from the root to one rank of every other host (the flat
// broadcast predicted fastest among them), then within every host from that rank. Any
// root, hosts of any sizes; the network carries S once to each other host.
Status BroadcastHierarchical(const Context& ctx, const Topology& topo, void* buf, size_t count, DataType dtype,
                             int root, const Tuning& tuning);
// reduce: binomial tree towards root, pipelined in chunks; recv is used on root only.
Status ReduceTree(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                  const Tuning& tuning);
// all_gather: ring; recv holds size*count elements, rank r's block at r*count.
Status AllGatherRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype,
                     const Tuning& tuning);
// all_gather: the same ring over blocks of any size, n >= 2: block(i) is rank i's span
// of recv (elements of es bytes), send holds this rank's block (may be recv at its span).
Status AllGatherRingBlocks(const Context& ctx, const void* send, void* recv, size_t es,
                           const std::function<Span(int)>& block, const Tuning& tuning);
// all_gather over hosts of L ranks each: within the host, across hosts among the ranks
// of the same local index (each its own block, so a host's L connections work at once),
// then within the host again for the other hosts' blocks. Hosts of different sizes:
// InvalidArgument.
Status AllGatherHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                             DataType dtype, const Tuning& tuning);
// all_gather: recursive doubling, log2(n) steps; n a power of two.
Status AllGatherRecursiveDoubling(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype);
// reduce_scatter: ring; send holds size*count elements, recv gets this rank's reduced block.
Status ReduceScatterRing(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         const Tuning& tuning);
// reduce_scatter: the same ring over blocks of any size, n >= 2: block(i) is rank i's
// span of send (elements of dtype); recv gets this rank's block reduced.
Status ReduceScatterRingBlocks(const Context& ctx, const void* send, void* recv, DataType dtype, ReduceOp op,
                               const std::function<Span(int)>& block, const Tuning& tuning);
// reduce_scatter over hosts of L ranks each: within the host, each rank reduces the
// blocks of its rail (the ranks of its local index on every host), then the rail
// reduce-scatters them across hosts (a host's L connections at once). Hosts of
// different sizes: InvalidArgument.
Status ReduceScatterHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                                 DataType dtype, ReduceOp op, const Tuning& tuning);
// reduce over hosts: within every host to one rank (the root on its host), then among
// those ranks to the root, segment by segment. Any root, hosts of any sizes; the
// network carries S once from each other host.
Status ReduceHierarchical(const Context& ctx, const Topology& topo, const void* send, void* recv, size_t count,
                          DataType dtype, ReduceOp op, int root, const Tuning& tuning);
// gather / scatter: root-based (linear with all receives posted at once).
Status Gather(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, int root);
Status Scatter(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, int root);
// all_to_all: pairwise exchange; block j of send goes to rank j, block i of recv came from rank i.
Status AllToAllPairwise(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype);

}  // namespace chorus::algos
