// Tree all-reduce: a double binary tree (binomial_tree.h's BinaryTree, and its mirror),
// each tree carrying half of the buffer, pipelined in chunks. In each tree chunk c is
// reduced up towards the root (each rank reduces its children's chunk with its own in
// one pass, as reduce_tree.cc does) while chunks c-1.. come back down from the root
// (as broadcast_tree.cc sends them), so a call takes about 2 depth + C - 1 chunk times
// for C chunks instead of recursive doubling's log2 n whole-buffer steps. A binary tree
// keeps every rank's links to three; the mirror makes the inner ranks of one tree the
// leaves of the other, so the forwarding is shared by all ranks (docs/design/tree_allreduce.md).
//
// One thread runs both trees, in steps: at step s a rank at depth h sends chunk s up and
// chunk s - 2h down (by then its parent has it), first in the tree where it is a leaf.
// Every wait is for a peer's message of an earlier step, or of the same step from a
// child in the one tree where the rank has children (the root: its own reduce before
// the chunk goes down), so no cycle can form.
//
// Up, a parent posts its children's receives kChunksInFlight chunks ahead and credits
// each further one (credits.h); down, a child posts every receive up front into recv and
// credits its parent once for the rest of the call, as the broadcast does. Tags: tree t
// sends chunk c up on step 4c + 2t and down on 4c + 2t + 1, up-credits on step 2t and
// down-credits on 2t + 1, so no two kinds of message share a direction and a tag.
// The buffers are staged whole (Streams() is false): the staging hooks are not used.
#include <algorithm>
#include <deque>
#include <utility>
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

// Up: chunks whose receives (one per child) are posted ahead of the one being reduced,
// as many as a child sends before its parent sent any credit. Down: as many go to a
// child before its one credit.
constexpr size_t kChunksInFlight = 2;

struct Call {
  const Context& ctx;
  const void* send;
  void* recv;
  DataType dtype;
  ReduceOp op;
  size_t es;
  size_t chunk_elems;
  size_t unasked;  // chunks sent before credit, up and down
  ChunkPool& pool;
  PendingSends& sends;
};

// This rank's part in one of the two trees.
class TreeRun {
 public:
  TreeRun(const Call& call, int tree, Span part)
      : c_(call),
        tree_(static_cast<uint32_t>(tree)),
        links_(BinaryTree(call.ctx.rank(), call.ctx.size(), tree == 1)),
        lag_(2 * static_cast<size_t>(BinaryTreeDepth(call.ctx.rank(), call.ctx.size(), tree == 1))),
        part_(part),
        nchunks_(NumChunks(part.count, call.chunk_elems)),
        up_credits_(call.ctx, links_.parent, 2 * tree_, call.unasked) {}

  size_t steps() const { return nchunks_ + lag_; }
  bool inner() const { return !links_.children.empty(); }

  // Posts every down receive and the first up receives.
  Status Start() {
    if (links_.parent >= 0) {
      down_posted_.reserve(nchunks_);
      for (size_t ci = 0; ci < nchunks_; ++ci) {
        const Span ch = Chunk(ci);
        down_posted_.push_back(
            PostRecv(c_.ctx, links_.parent, DownStep(ci), At(c_.recv, ch.offset, c_.es), ch.count * c_.es));
      }
      if (nchunks_ > c_.unasked) SendCredit(c_.ctx, c_.sends, links_.parent, 2 * tree_ + 1);
    }
    down_credits_.reserve(links_.children.size());
    for (int child : links_.children) down_credits_.emplace_back(c_.ctx, child, 2 * tree_ + 1, c_.unasked);
    for (size_t i = 0; i < kChunksInFlight; ++i) CHORUS_RETURN_IF_ERROR(PostNextUp());
    return Status::Ok();
  }

  // Chunk s up, then chunk s - lag down (where there are such chunks).
  Status Step(size_t s) {
    if (s < nchunks_) CHORUS_RETURN_IF_ERROR(Up(s));
    if (s >= lag_ && s - lag_ < nchunks_) CHORUS_RETURN_IF_ERROR(Down(s - lag_));
    return Status::Ok();
  }

 private:
  struct PostedChunk {
    std::vector<int> slots;  // one scratch slot per child
    std::vector<transport::RequestPtr> reqs;
  };

  Span Chunk(size_t ci) const { return ChunkOf(part_, c_.chunk_elems, ci); }
  uint32_t UpStep(size_t ci) const { return static_cast<uint32_t>(4 * ci) + 2 * tree_; }
  uint32_t DownStep(size_t ci) const { return UpStep(ci) + 1; }

  Status PostNextUp() {
    if (links_.children.empty() || next_up_ >= nchunks_) return Status::Ok();
    const Span ch = Chunk(next_up_);
    PostedChunk pc;
    for (int child : links_.children) {
      Result<int> slot = c_.pool.Acquire();
      if (!slot.ok()) return slot.status();
      pc.slots.push_back(*slot);
      pc.reqs.push_back(PostRecv(c_.ctx, child, UpStep(next_up_), c_.pool.data(*slot), ch.count * c_.es));
      if (next_up_ >= c_.unasked) SendCredit(c_.ctx, c_.sends, child, 2 * tree_);  // the child may send it now
    }
    up_posted_.push_back(std::move(pc));
    ++next_up_;
    return Status::Ok();
  }

  // Own chunk ci op child_0's op child_1's, to the parent (the root: into recv, final).
  Status Up(size_t ci) {
    const Span ch = Chunk(ci);
    const char* own = At(c_.send, ch.offset, c_.es);
    if (links_.children.empty()) {
      // A leaf: its own data goes up as it is, once credited.
      CHORUS_RETURN_IF_ERROR(up_credits_.Await(ci));
      c_.sends.Post(links_.parent, UpStep(ci), own, ch.count * c_.es);
      return Status::Ok();
    }
    PostedChunk pc = std::move(up_posted_.front());
    up_posted_.pop_front();
    inputs_.assign(1, own);
    for (size_t k = 0; k < links_.children.size(); ++k) {
      CHORUS_RETURN_IF_ERROR(Wait(c_.ctx, *pc.reqs[k], links_.children[k]));
      inputs_.push_back(c_.pool.data(pc.slots[k]));
    }
    const bool root = links_.parent < 0;
    char* dst = root ? At(c_.recv, ch.offset, c_.es) : c_.pool.data(pc.slots[0]);
    CHORUS_RETURN_IF_ERROR(
        kernels::ReduceN(c_.dtype, c_.op, dst, inputs_.data(), static_cast<int>(inputs_.size()), ch.count));
    if (root) {
      // The root holds the final chunk: AVG divides it once, before it goes down.
      if (c_.op == ReduceOp::kAvg) {
        CHORUS_RETURN_IF_ERROR(kernels::ScaleForAvg(c_.dtype, dst, ch.count, c_.ctx.size()));
      }
      for (int slot : pc.slots) c_.pool.Release(slot);
    } else {
      // The partial result goes to the parent once credited; its slot is reused once
      // that send is done.
      CHORUS_RETURN_IF_ERROR(up_credits_.Await(ci));
      c_.pool.ReleaseAfter(pc.slots[0], c_.sends.Post(links_.parent, UpStep(ci), dst, ch.count * c_.es));
      for (size_t k = 1; k < pc.slots.size(); ++k) c_.pool.Release(pc.slots[k]);
    }
    return PostNextUp();
  }

  // The final chunk ci from the parent (the root has it) on to every child.
  Status Down(size_t ci) {
    const Span ch = Chunk(ci);
    if (links_.parent >= 0) {
      CHORUS_RETURN_IF_ERROR(Wait(c_.ctx, *down_posted_[ci], links_.parent));
      down_posted_[ci].reset();
    }
    for (size_t k = 0; k < links_.children.size(); ++k) {
      CHORUS_RETURN_IF_ERROR(down_credits_[k].Await(std::min(ci, c_.unasked)));
      c_.sends.Post(links_.children[k], DownStep(ci), At(c_.recv, ch.offset, c_.es), ch.count * c_.es);
    }
    return Status::Ok();
  }

  const Call& c_;
  const uint32_t tree_;
  const TreeLinks links_;
  const size_t lag_;
  const Span part_;
  const size_t nchunks_;
  CreditsFrom up_credits_;                 // from the parent (none at the root)
  std::vector<CreditsFrom> down_credits_;  // one per child
  std::deque<PostedChunk> up_posted_;
  size_t next_up_ = 0;
  std::vector<transport::RequestPtr> down_posted_;  // chunk ci's receive at ci
  std::vector<const void*> inputs_;
};

}  // namespace

Status AllReduceTree(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     const Tuning& tuning) {
  const int n = ctx.size();
  const size_t es = DataTypeSize(dtype);
  if (n == 1) return CopyAlone(ctx, send, recv, count * es);
  // Each tree reduces half; halves start at a multiple of 64 bytes for vector loads.
  const size_t unit = std::max<size_t>(1, 64 / es);
  const Span halves[2] = {UnitBlock(count, 2, 0, unit), UnitBlock(count, 2, 1, unit)};
  const size_t chunk_bytes = TreeChunkBytes(halves[0].count * es, n, tuning.chunk_bytes);
  const size_t chunk_elems = ChunkElems(chunk_bytes, es);
  // Crowded cores: a peer a call ahead parks nearly every message in the transport of
  // one a call behind (docs/design/flow_control.md).
  const size_t unasked =
      UnaskedChunks(tuning.crowded_cores, std::min(halves[0].count, chunk_elems) * es, kChunksInFlight);
  ChunkPool pool(chunk_elems * es, ctx.scratch);
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    const Call call{ctx, send, recv, dtype, op, es, chunk_elems, unasked, pool, sends};
    TreeRun trees[2] = {TreeRun(call, 0, halves[0]), TreeRun(call, 1, halves[1])};
    for (TreeRun& t : trees) CHORUS_RETURN_IF_ERROR(t.Start());
    const size_t steps = std::max(trees[0].steps(), trees[1].steps());
    // The tree where this rank is a leaf first: its chunk goes up at once, before the
    // rank waits for its children in the other (on 2 ranks: one latency, not two).
    TreeRun* order[2] = {&trees[0], &trees[1]};
    if (trees[0].inner()) std::swap(order[0], order[1]);
    for (size_t s = 0; s < steps; ++s) {
      for (TreeRun* t : order) CHORUS_RETURN_IF_ERROR(t->Step(s));
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
