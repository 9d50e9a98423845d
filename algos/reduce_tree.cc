// Reduce up a binomial tree (binomial_tree.h) towards root, pipelined in chunks: for
// each chunk c a rank receives c from all its children, reduces them with its own
// data in one pass (ReduceN) and sends the result to its parent while the children's
// chunks c+1.. are arriving. The root reduces into recv; other ranks reduce into
// scratch chunks that are recycled once the send to the parent has completed
// (leaves send straight from the send buffer).
//
// A parent posts its children's receives kChunksInFlight chunks ahead; a child sends
// that many chunks unasked (none of kCreditAtBytes and more where a host runs more
// ranks than it has cores) and each further one once its parent sent credit for it (credits.h),
// which the parent does as it posts the receive. Without that a leaf would send its
// whole buffer at once and most of it would wait in the parent's transport.
//
// On streamed bounce buffers (ctx.staging) each rank waits for a chunk of its input
// before it sends or reduces it; the root reports each chunk final once reduced.
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "algos/binomial_tree.h"
#include "algos/buffer.h"
#include "algos/chunking.h"
#include "algos/collectives.h"
#include "algos/credits.h"
#include "algos/pending_sends.h"
#include "kernels/reduce.h"

namespace chorus::algos {
namespace {

// Chunks whose receives (one per child) are posted ahead of the one being reduced; as
// many as a child sends before its parent sent any credit.
constexpr size_t kChunksInFlight = 2;

struct PostedChunk {
  size_t index;
  std::vector<int> slots;  // one scratch slot per child
  std::vector<transport::RequestPtr> reqs;
};

}  // namespace

Status ReduceTree(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                  const Tuning& tuning) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (root < 0 || root >= n) {
    return InvalidArgument("reduce: root " + std::to_string(root) + " is not a rank of a world of size " +
                           std::to_string(n));
  }
  const size_t es = DataTypeSize(dtype);
  if (n == 1) return CopyAlone(ctx, send, recv, count * es);
  const TreeLinks tree = BinomialTree(r, root, n);
  const size_t chunk_elems = ChunkElems(tuning.chunk_bytes, es);
  const Span all{0, count};
  const size_t nchunks = NumChunks(count, chunk_elems);
  const size_t nchildren = tree.children.size();

  // Crowded cores: children a call ahead of their parent (back-to-back reduces) park
  // nearly every message in the root's transport (docs/design/flow_control.md).
  const size_t unasked = UnaskedChunks(tuning.crowded_cores, std::min(count, chunk_elems) * es, kChunksInFlight);
  ChunkPool pool(chunk_elems * es, ctx.scratch);
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::deque<PostedChunk> posted;
    size_t next_to_post = 0;
    auto post_next = [&]() -> Status {
      if (nchildren == 0 || next_to_post >= nchunks) return Status::Ok();
      const Span c = ChunkOf(all, chunk_elems, next_to_post);
      PostedChunk pc{next_to_post, {}, {}};
      for (int child : tree.children) {
        Result<int> slot = pool.Acquire();
        if (!slot.ok()) return slot.status();
        pc.slots.push_back(*slot);
        pc.reqs.push_back(PostRecv(ctx, child, static_cast<uint32_t>(next_to_post), pool.data(*slot), c.count * es));
        if (next_to_post >= unasked) SendCredit(ctx, sends, child, 0);  // the child may send it now
      }
      posted.push_back(std::move(pc));
      ++next_to_post;
      return Status::Ok();
    };
    for (size_t i = 0; i < kChunksInFlight; ++i) CHORUS_RETURN_IF_ERROR(post_next());

    CreditsFrom credited(ctx, tree.parent, 0, unasked);  // by the parent (none at the root)
    std::vector<const void*> inputs;
    for (size_t ci = 0; ci < nchunks; ++ci) {
      const Span c = ChunkOf(all, chunk_elems, ci);
      const char* own = At(send, c.offset, es);
      CHORUS_RETURN_IF_ERROR(InputReady(ctx, c.offset * es, c.count * es));
      if (nchildren == 0) {
        // A leaf: its own data goes up as it is, once credited.
        CHORUS_RETURN_IF_ERROR(credited.Await(ci));
        sends.Post(tree.parent, static_cast<uint32_t>(ci), own, c.count * es);
        CHORUS_RETURN_IF_ERROR(sends.Reap());
        continue;
      }
      PostedChunk pc = std::move(posted.front());
      posted.pop_front();
      // Chunk ci from every child, then own data op child_0 op child_1 ... in one pass.
      inputs.assign(1, own);
      for (size_t k = 0; k < nchildren; ++k) {
        CHORUS_RETURN_IF_ERROR(Wait(ctx, *pc.reqs[k], tree.children[k]));
        inputs.push_back(pool.data(pc.slots[k]));
      }
      char* dst = tree.parent < 0 ? At(recv, c.offset, es) : pool.data(pc.slots[0]);
      CHORUS_RETURN_IF_ERROR(kernels::ReduceN(dtype, op, dst, inputs.data(), static_cast<int>(inputs.size()), c.count));
      if (tree.parent < 0) {
        // The root holds the final chunk: AVG divides it once.
        if (op == ReduceOp::kAvg) CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(dtype, dst, c.count, n));
        OutputFinal(ctx, c.offset * es, c.count * es);
        for (int slot : pc.slots) pool.Release(slot);
      } else {
        // The partial result goes to the parent once credited; its slot is reused once
        // that send is done.
        CHORUS_RETURN_IF_ERROR(credited.Await(ci));
        pool.ReleaseAfter(pc.slots[0], sends.Post(tree.parent, static_cast<uint32_t>(ci), dst, c.count * es));
        for (size_t k = 1; k < nchildren; ++k) pool.Release(pc.slots[k]);
      }
      CHORUS_RETURN_IF_ERROR(post_next());
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
