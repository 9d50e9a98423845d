// Broadcast down a binomial tree (binomial_tree.h), pipelined in chunks: each rank
// receives chunk c from its parent straight into the user buffer, then forwards it
// to its children while chunks c+1.. are already arriving. Chunk c travels with tag
// step c (FIFO per (peer, tag) keeps them apart when more than 2^16 chunks wrap).
#include <deque>
#include <string>

#include "algos/binomial_tree.h"
#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"

namespace chorus::algos {
namespace {

// Receives posted ahead; they land in the user buffer, so this costs no memory.
constexpr size_t kRecvsInFlight = 4;

}  // namespace

Status BroadcastTree(const Context& ctx, void* buf, size_t count, DataType dtype, int root, const Tuning& tuning) {
  const int n = ctx.size();
  if (root < 0 || root >= n) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(n));
  }
  if (n == 1) return Status::Ok();
  const size_t es = DataTypeSize(dtype);
  const TreeLinks tree = BinomialTree(ctx.rank(), root, n);
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  const Span all{0, count};
  const size_t nchunks = NumChunks(count, chunk_elems);

  PendingSends sends(ctx);
  std::deque<transport::RequestPtr> posted;
  size_t next_to_post = 0;
  auto post_next = [&] {
    if (tree.parent < 0 || next_to_post >= nchunks) return;
    const Span c = ChunkOf(all, chunk_elems, next_to_post);
    posted.push_back(
        PostRecv(ctx, tree.parent, static_cast<uint32_t>(next_to_post), At(buf, c.offset, es), c.count * es));
    ++next_to_post;
  };
  for (size_t i = 0; i < kRecvsInFlight; ++i) post_next();

  for (size_t ci = 0; ci < nchunks; ++ci) {
    const Span c = ChunkOf(all, chunk_elems, ci);
    // Chunk ci from the parent (the root has it already) ...
    if (tree.parent >= 0) {
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *posted.front(), tree.parent));
      posted.pop_front();
      post_next();
    }
    // ... goes on to every child.
    for (int child : tree.children) sends.Post(child, static_cast<uint32_t>(ci), At(buf, c.offset, es), c.count * es);
    CHORUS_RETURN_IF_ERROR(sends.Reap());
  }
  return sends.WaitAll();
}

}  // namespace chorus::algos
