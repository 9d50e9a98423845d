// Broadcast down a tree (binomial_tree.h: the binomial tree, or the chain), pipelined in
// chunks: each rank receives chunk c from its parent straight into the user buffer,
// then forwards it to its children while chunks c+1.. are already arriving. Of C chunks
// on n ranks, the chain delivers the last after about (n - 2) + C chunk times; the
// binomial tree's root sends each chunk to its ceil(log2 n) children in turn, about
// ceil(log2 n) * C (the selector weighs the two). Chunk c travels with tag
// step c (FIFO per (peer, tag) keeps them apart when more than 2^16 chunks wrap).
// Every receive is posted up front: they land in the user buffer (no memory), and a
// parent sends each chunk on as soon as it has it, so with only a few posted most
// chunks would arrive before their receive and be copied twice
// (docs/design/flow_control.md). A child
// then sends its parent credit for the rest of the call at once (credits.h): a parent sends
// kUnasked chunks to a child that has not come yet (none of kCreditAtBytes and more
// where a host runs more ranks than it has cores), and waits for it before more.
//
// On streamed bounce buffers (ctx.staging) the root waits for each chunk before it
// sends it; every rank reports a chunk final once it has it (the root's buffer is its
// input, unchanged).
//
// Out of place, the root sends each chunk from its input and copies it into its output
// after posting the sends, so the copy overlaps the children's receiving (reading the
// input, by shared memory's single copy) instead of going before the broadcast.
#include <algorithm>
#include <string>
#include <vector>

#include "algos/binomial_tree.h"
#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/credits.h"
#include "algos/pending_sends.h"

namespace chorus::algos {
namespace {

// Chunks a parent sends a child before the child's credit (chunks below kCreditAtBytes).
constexpr size_t kUnasked = 2;

// The broadcast over `links` (this rank's parent and children in the tree chosen).
Status BroadcastDown(const Context& ctx, const void* send, void* buf, size_t count, DataType dtype, int root,
                     const Tuning& tuning, TreeLinks (*links)(int rank, int root, int n)) {
  const int n = ctx.size();
  if (root < 0 || root >= n) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(n));
  }
  const size_t es = DataTypeSize(dtype);
  // What this rank sends on: the root's input, everyone else's output.
  const void* from = ctx.rank() == root && send != nullptr ? send : buf;
  if (n == 1) return CopyAlone(ctx, from, buf, count * es);
  const TreeLinks tree = links(ctx.rank(), root, n);
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  const Span all{0, count};
  const size_t nchunks = NumChunks(count, chunk_elems);
  // Crowded cores: a parent a call ahead of its child (back-to-back broadcasts) parks
  // most messages in the child's transport (docs/design/flow_control.md).
  const size_t unasked = UnaskedChunks(tuning.crowded_cores, std::min(count, chunk_elems) * es, kUnasked);

  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::vector<transport::RequestPtr> posted;  // chunk ci's receive at ci
    if (tree.parent >= 0) posted.reserve(nchunks);
    for (size_t ci = 0; tree.parent >= 0 && ci < nchunks; ++ci) {
      const Span c = ChunkOf(all, chunk_elems, ci);
      posted.push_back(PostRecv(ctx, tree.parent, static_cast<uint32_t>(ci), At(buf, c.offset, es), c.count * es));
    }
    if (tree.parent >= 0 && nchunks > unasked) SendCredit(ctx, sends, tree.parent, 0);
    std::vector<CreditsFrom> credited;  // one credit per child, for every chunk past `unasked`
    credited.reserve(tree.children.size());
    for (int child : tree.children) credited.emplace_back(ctx, child, 0, unasked);
    for (size_t ci = 0; ci < nchunks; ++ci) {
      const Span c = ChunkOf(all, chunk_elems, ci);
      // Chunk ci from the parent (the root has it already) ...
      if (tree.parent >= 0) {
        CHORUS_RETURN_IF_ERROR(Wait(ctx, *posted[ci], tree.parent));
        posted[ci].reset();
      } else {
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, c.offset * es, c.count * es));
      }
      // ... goes on to every child ...
      for (size_t k = 0; k < tree.children.size(); ++k) {
        CHORUS_RETURN_IF_ERROR(credited[k].Await(std::min(ci, unasked)));
        sends.Post(tree.children[k], static_cast<uint32_t>(ci), At(from, c.offset, es), c.count * es);
      }
      // ... and, out of place, into the root's output meanwhile.
      CopyMovingBytes(ctx, At(buf, c.offset, es), At(from, c.offset, es), c.count * es);
      OutputFinal(ctx, c.offset * es, c.count * es);
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace

Status BroadcastTree(const Context& ctx, const void* send, void* buf, size_t count, DataType dtype, int root,
                     const Tuning& tuning) {
  return BroadcastDown(ctx, send, buf, count, dtype, root, tuning, BinomialTree);
}

Status BroadcastChain(const Context& ctx, const void* send, void* buf, size_t count, DataType dtype, int root,
                      const Tuning& tuning) {
  return BroadcastDown(ctx, send, buf, count, dtype, root, tuning, ChainLinks);
}

}  // namespace chorus::algos
