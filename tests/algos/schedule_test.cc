// The pure schedule helpers the algorithms are built on: block split, chunk walk,
// binomial tree. No transport needed.
#include <gtest/gtest.h>

#include <vector>

#include "algos/binomial_tree.h"
#include "algos/chunking.h"

namespace chorus::algos {
namespace {

TEST(EvenBlockTest, CoversTheBufferWithTheRemainderOnTheFirstBlocks) {
  for (int n = 1; n <= 7; ++n) {
    for (size_t count : {0, 1, 2, 6, 7, 8, 1023}) {
      size_t next = 0;
      for (int i = 0; i < n; ++i) {
        const Span b = EvenBlock(count, n, i);
        EXPECT_EQ(b.offset, next) << "n=" << n << " count=" << count << " block " << i;
        EXPECT_EQ(b.count, count / n + (static_cast<size_t>(i) < count % n ? 1 : 0));
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(ChunkWalkTest, WalksEveryChunkOfEveryStepAndEmptyBlocksOnce) {
  // Blocks of 5, 0 and 3 elements in chunks of 2: 3 + 1 (empty) + 2 chunks.
  const std::vector<Span> blocks = {{10, 5}, {15, 0}, {20, 3}};
  ChunkWalk w(3, 2, [&](int s) { return blocks[s]; });
  std::vector<std::pair<int, Span>> seen;
  for (; !w.done(); w.Next()) seen.emplace_back(w.step(), w.chunk());
  const std::vector<std::pair<int, Span>> want = {{0, {10, 2}}, {0, {12, 2}}, {0, {14, 1}},
                                                  {1, {15, 0}}, {2, {20, 2}}, {2, {22, 1}}};
  ASSERT_EQ(seen.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(seen[i].first, want[i].first) << i;
    EXPECT_EQ(seen[i].second.offset, want[i].second.offset) << i;
    EXPECT_EQ(seen[i].second.count, want[i].second.count) << i;
  }
  ChunkWalk none(0, 2, [&](int s) { return blocks[s]; });
  EXPECT_TRUE(none.done());
}

TEST(ChunkTest, ChunkElemsNeverZero) {
  EXPECT_EQ(ChunkElems(0, 8), 1u);
  EXPECT_EQ(ChunkElems(7, 8), 1u);
  EXPECT_EQ(ChunkElems(17, 8), 2u);
  EXPECT_EQ(NumChunks(0, 4), 1u);
  EXPECT_EQ(NumChunks(9, 4), 3u);
}

TEST(BinomialTreeTest, EveryRankHasOneParentAndTheTreeIsShallow) {
  for (int n = 1; n <= 33; ++n) {
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    for (int root = 0; root < n; ++root) {
      std::vector<int> parent_of(n, -2);
      for (int r = 0; r < n; ++r) {
        const TreeLinks t = BinomialTree(r, root, n);
        EXPECT_EQ(t.parent < 0, r == root) << "n=" << n << " root=" << root << " rank=" << r;
        for (int c : t.children) {
          EXPECT_EQ(parent_of[c], -2) << "rank " << c << " has two parents";
          parent_of[c] = r;
          EXPECT_EQ(BinomialTree(c, root, n).parent, r);
        }
      }
      for (int r = 0; r < n; ++r) {
        if (r == root) continue;
        EXPECT_NE(parent_of[r], -2) << "rank " << r << " is nobody's child (n=" << n << " root=" << root << ")";
        int depth = 0;
        for (int x = r; x != root; x = BinomialTree(x, root, n).parent) ++depth;
        EXPECT_LE(depth, log2n);
      }
    }
  }
}

}  // namespace
}  // namespace chorus::algos
