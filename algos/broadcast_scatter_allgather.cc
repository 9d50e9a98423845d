// Broadcast of large messages by van de Geijn's scatter + all-gather: the buffer is cut
// into n blocks (EvenBlock, by virtual rank v = (rank - root) mod n, so that a subtree's
// blocks are contiguous), the root scatters them down the binomial tree (binomial_tree.h)
// and the ranks all-gather them round the ring (AllGatherRingBlocks). The root sends
// (n-1)/n * S in ceil(log2 n) steps, then every rank sends (n-1)/n * S in n-1 steps:
// about 2 S/B whatever n, where the chain pays (n-2) chunk times and the tree log2 n * S/B.
//
//   scatter (tag step n-1, past the ring's 0 .. n-2; one message per tree edge):
//     v > 0 receives the blocks of its subtree, [v, v + lowbit(v)), from its parent;
//     then sends child v + 2^k the blocks of its subtree, [v + 2^k, v + 2^(k+1)), largest first;
//   all-gather: the ring over the n blocks, ours sent from where the scatter put it.
//
// A scatter message of kCreditAtBytes and more goes once the child's credit says its
// receive is posted (credits.h). Empty blocks (count < n) still travel as empty
// messages, so every rank exchanges the same messages whatever the count. Device
// buffers are staged whole (Streams() is false): the hooks are not used.
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

Status BroadcastScatterAllGather(const Context& ctx, void* buf, size_t count, DataType dtype, int root,
                                 const Tuning& tuning) {
  const int n = ctx.size();
  if (root < 0 || root >= n) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(n));
  }
  if (n == 1) return Status::Ok();
  const size_t es = DataTypeSize(dtype);
  const int v = Mod(ctx.rank() - root, n);
  // The blocks of virtual ranks [a, b) as one span of buf.
  const auto first = [&](int u) { return u < n ? EvenBlock(count, n, u).offset : count; };
  const auto blocks = [&](int a, int b) { return Span{first(a), first(std::min(b, n)) - first(a)}; };
  const auto scatter_step = static_cast<uint32_t>(n - 1);
  const TreeLinks tree = BinomialTree(ctx.rank(), root, n);

  CHORUS_RETURN_IF_ERROR(AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    // Our subtree's blocks from the parent (the root has them all).
    if (tree.parent >= 0) {
      const Span mine = blocks(v, v + (v & -v));
      transport::RequestPtr in = PostRecv(ctx, tree.parent, scatter_step, At(buf, mine.offset, es), mine.count * es);
      if (mine.count * es >= kCreditAtBytes) SendCredit(ctx, sends, tree.parent, scatter_step);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, tree.parent));
    }
    // Each child its subtree's blocks, once its receive is posted where they are large.
    for (int child : tree.children) {
      const int cv = Mod(child - root, n);
      const Span theirs = blocks(cv, cv + (cv & -cv));
      if (theirs.count * es >= kCreditAtBytes) {
        CreditsFrom credit(ctx, child, scatter_step, 0);
        CHORUS_RETURN_IF_ERROR(credit.Await(0));
      }
      sends.Post(child, scatter_step, At(buf, theirs.offset, es), theirs.count * es);
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    // The ring writes the blocks these sends read (the same bytes): they finish first.
    return sends.WaitAll();
  }));

  // Every rank holds its own block: all-gather them in place.
  const auto block = [&](int rank) { return EvenBlock(count, n, Mod(rank - root, n)); };
  return AllGatherRingBlocks(ctx, At(buf, block(ctx.rank()).offset, es), buf, es, block, tuning);
}

}  // namespace chorus::algos
