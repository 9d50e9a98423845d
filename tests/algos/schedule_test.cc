// The pure schedule helpers the algorithms are built on: block split, chunk walk,
// binomial tree. No transport needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/binomial_tree.h"
#include "algos/chunking.h"
#include "algos/selector.h"

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

TEST(UnitBlockTest, CoversTheBufferInWholeUnits) {
  for (int n = 1; n <= 5; ++n) {
    for (size_t count : {0, 1, 63, 64, 65, 200, 1023, 4099}) {
      size_t next = 0;
      for (int i = 0; i < n; ++i) {
        const Span b = UnitBlock(count, n, i, 64);
        EXPECT_EQ(b.offset, next) << "n=" << n << " count=" << count << " block " << i;
        EXPECT_TRUE(b.count == 0 || b.offset % 64 == 0) << "n=" << n << " count=" << count << " block " << i;
        EXPECT_LE(b.count, ((count + 63) / 64 + n - 1) / n * 64);
        next += b.count;
      }
      EXPECT_EQ(next, count) << "n=" << n << " count=" << count;
    }
  }
  EXPECT_EQ(UnitBlock(256, 2, 1, 64).offset, 128u);  // two units each
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

TEST(ChainTest, EachRankForwardsToTheNextFromTheRoot) {
  for (int n = 1; n <= 9; ++n) {
    for (int root = 0; root < n; ++root) {
      int r = root, seen = 1;
      EXPECT_EQ(ChainLinks(root, root, n).parent, -1);
      while (!ChainLinks(r, root, n).children.empty()) {
        ASSERT_EQ(ChainLinks(r, root, n).children.size(), 1u);
        const int next = ChainLinks(r, root, n).children[0];
        EXPECT_EQ(next, (r + 1) % n) << "n=" << n << " root=" << root;
        EXPECT_EQ(ChainLinks(next, root, n).parent, r);
        r = next;
        ++seen;
      }
      EXPECT_EQ(seen, n) << "the chain from root " << root << " of " << n << " misses ranks";
    }
  }
}

// The algorithm of the lower prediction of the two (the first on a tie), as the selector
// weighs them.
Algorithm Faster(const Selector& s, Algorithm a, Algorithm b, size_t bytes, int n) {
  double ta = -1, tb = -1;
  for (const auto& [alg, us] : s.Predict(Collective::kBroadcast, bytes, n)) {
    if (alg == a) ta = us;
    if (alg == b) tb = us;
  }
  if (tb < 0) return a;
  if (ta < 0) return b;
  return tb < ta ? b : a;
}

// Broadcast: the chain where it delivers the last chunk sooner than the binomial tree
// ((n - 2) + C chunk times against ceil(log2 n) * C), the tree otherwise (the line
// between the two; scatter-allgather beats both from 3 ranks at these sizes).
TEST(SelectorTest, BroadcastTakesTheChainForManyChunks) {
  Result<Selector> made = Selector::Create(SelectorConfig{});  // 512 KiB chunks
  ASSERT_TRUE(made.ok());
  const Selector& s = made.value();
  const size_t chunk = 512 << 10;
  const Algorithm kT = Algorithm::kTree, kC = Algorithm::kChain;
  EXPECT_EQ(s.Choose(Collective::kBroadcast, 256 << 20, 2).algorithm, Algorithm::kTree);  // the same tree
  EXPECT_EQ(Faster(s, kT, kC, chunk, 3), kT);                                             // 2 against 2
  EXPECT_EQ(Faster(s, kT, kC, chunk + 1, 3), kC);                                         // 3 against 4
  Choice c = s.Choose(Collective::kBroadcast, chunk + 1, 3);
  EXPECT_NE(c.reason.find("predicted: tree "), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find(", chain "), std::string::npos) << c.reason;
  EXPECT_EQ(Faster(s, kT, kC, 2 * chunk, 4), kT);    // 4 against 4
  EXPECT_EQ(Faster(s, kT, kC, 3 * chunk, 4), kC);    // 5 against 6
  EXPECT_EQ(Faster(s, kT, kC, 12 * chunk, 64), kT);  // 74 against 72
  EXPECT_EQ(Faster(s, kT, kC, 13 * chunk, 64), kC);  // 75 against 78
  EXPECT_EQ(s.Choose(Collective::kBroadcast, kAgreedBroadcastMaxBytes + 1, 8).algorithm, Algorithm::kTree);
  // Other chunks move the line; CHORUS_ALGO forces either.
  SelectorConfig small;
  small.model.chunk_bytes = 64 << 10;
  EXPECT_EQ(Faster(Selector::Create(small).value(), kT, kC, 3 * (64 << 10), 4), kC);
  for (const char* forced : {"tree", "chain"}) {
    SelectorConfig f;
    f.forced = ParseAlgorithm(forced).value();
    EXPECT_STREQ(AlgorithmName(Selector::Create(f)->Choose(Collective::kBroadcast, 8 << 20, 4).algorithm), forced);
  }
  SelectorConfig chain;
  chain.forced = Algorithm::kChain;
  c = Selector::Create(chain)->Choose(Collective::kReduce, 8 << 20, 4);
  EXPECT_EQ(c.algorithm, Algorithm::kTree) << c.reason;
  EXPECT_NE(c.reason.find("CHORUS_ALGO=chain does not apply to reduce"), std::string::npos) << c.reason;
}

// Broadcast of large messages on large worlds: scatter + all-gather (about 2 S/B plus
// n + log2 n latencies) where the chain's n - 2 extra chunk times cost more; never on 2
// ranks, where the tree is one send of S.
TEST(SelectorTest, BroadcastTakesScatterAllGatherOnLargeWorlds) {
  const Selector s = Selector::Create(SelectorConfig{}).value();  // TCP, 512 KiB chunks
  Choice c = s.Choose(Collective::kBroadcast, 16 << 20, 64);
  EXPECT_EQ(c.algorithm, Algorithm::kScatterAllGather) << c.reason;
  EXPECT_NE(c.reason.find(", scatter_allgather "), std::string::npos) << c.reason;
  EXPECT_EQ(s.Choose(Collective::kBroadcast, 64 << 20, 256).algorithm, Algorithm::kScatterAllGather);
  EXPECT_EQ(s.Choose(Collective::kBroadcast, 1 << 30, 4096).algorithm, Algorithm::kScatterAllGather);
  // At 64 ranks x 64 MiB the chain's 128 chunks pipeline past its 62 extra chunk times.
  EXPECT_EQ(s.Choose(Collective::kBroadcast, 64 << 20, 64).algorithm, Algorithm::kChain);
  for (size_t bytes : {size_t{64} << 10, size_t{64} << 20, size_t{1} << 30}) {
    EXPECT_NE(s.Choose(Collective::kBroadcast, bytes, 2).algorithm, Algorithm::kScatterAllGather) << bytes;
  }
  SelectorConfig f;
  f.forced = ParseAlgorithm("scatter_allgather").value();
  c = Selector::Create(f)->Choose(Collective::kBroadcast, 8, 2);
  EXPECT_EQ(c.algorithm, Algorithm::kScatterAllGather) << c.reason;
  EXPECT_EQ(Selector::Create(f)->Choose(Collective::kReduce, 8 << 20, 4).algorithm, Algorithm::kTree);
  EXPECT_FALSE(Streams(Collective::kBroadcast, Algorithm::kScatterAllGather));
}

// A small broadcast rides the agreement's rounds (dissemination) up to the threshold on
// every world (on two ranks up to a chunk), the tree or chain above; CHORUS_ALGO forces
// either way.
TEST(SelectorTest, SmallBroadcastAgreesInItsOwnRounds) {
  const SelectorConfig config;
  const Selector s = Selector::Create(config).value();
  for (int n : {1, 2, 3, 5, 64}) {
    const size_t t = AgreedBroadcastMaxBytes(config.model, n);
    EXPECT_EQ(t, n == 2 ? config.model.chunk_bytes : kAgreedBroadcastMaxBytes) << n;
    for (size_t bytes : {size_t{0}, size_t{1}, t - 1, t}) {
      Choice c = s.Choose(Collective::kBroadcast, bytes, n);
      EXPECT_EQ(c.algorithm, Algorithm::kDissemination) << bytes << " B on " << n << ": " << c.reason;
      EXPECT_NE(c.reason.find("the data in the rounds that agree on the call"), std::string::npos) << c.reason;
    }
    EXPECT_EQ(s.Choose(Collective::kBroadcast, t + 1, n).algorithm, Algorithm::kTree) << n;
  }
  // Where ranks outnumber cores, further: each round saved is a wait for the scheduler.
  SelectorConfig crowded;
  crowded.model.crowding = 2;
  const Selector sc = Selector::Create(crowded).value();
  EXPECT_EQ(sc.Choose(Collective::kBroadcast, kAgreedBroadcastCrowdedMaxBytes, 4).algorithm, Algorithm::kDissemination);
  EXPECT_EQ(sc.Choose(Collective::kBroadcast, kAgreedBroadcastCrowdedMaxBytes + 1, 4).algorithm, Algorithm::kTree);
  // Reduce, gather and scatter agree first at every size.
  EXPECT_EQ(s.Choose(Collective::kReduce, 8, 4).algorithm, Algorithm::kTree);
  SelectorConfig tree;
  tree.forced = Algorithm::kTree;
  Choice c = Selector::Create(tree)->Choose(Collective::kBroadcast, 8, 4);
  EXPECT_EQ(c.algorithm, Algorithm::kTree) << c.reason;
  EXPECT_NE(c.reason.find("forced by CHORUS_ALGO=tree"), std::string::npos) << c.reason;
  SelectorConfig dissemination;
  dissemination.forced = ParseAlgorithm("dissemination").value();
  EXPECT_EQ(Selector::Create(dissemination)->Choose(Collective::kBroadcast, 1 << 20, 4).algorithm,
            Algorithm::kDissemination);
  EXPECT_FALSE(Streams(Collective::kBroadcast, Algorithm::kDissemination));
}

// all_gather: recursive doubling on power-of-two worlds of 4 or more up to 4 MiB of
// output, the ring otherwise; forced, only where the world is a power of two.
TEST(SelectorTest, SmallAllGathersOnPowerOfTwoWorldsTakeRecursiveDoubling) {
  const Selector s;
  EXPECT_EQ(s.Choose(Collective::kAllGather, 4096, 4).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllGather, kAllGatherRdMaxBytes, 16).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllGather, kAllGatherRdMaxBytes + 1, 4).algorithm, Algorithm::kRing);
  EXPECT_EQ(s.Choose(Collective::kAllGather, 4096, 2).algorithm, Algorithm::kRing);
  EXPECT_EQ(s.Choose(Collective::kAllGather, 4096, 6).algorithm, Algorithm::kRing);
  EXPECT_EQ(s.Choose(Collective::kReduceScatter, 4096, 4).algorithm, Algorithm::kRing);
  SelectorConfig rd;
  rd.forced = ParseAlgorithm("rd").value();  // the short name
  Result<Selector> forced = Selector::Create(rd);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->Choose(Collective::kAllGather, 64 << 20, 8).algorithm, Algorithm::kRecursiveDoubling);
  const Choice c = forced->Choose(Collective::kAllGather, 4096, 6);
  EXPECT_EQ(c.algorithm, Algorithm::kRing) << c.reason;
  EXPECT_NE(c.reason.find("CHORUS_ALGO=recursive_doubling cannot run all_gather on 6 ranks"), std::string::npos)
      << c.reason;
  EXPECT_TRUE(Streams(Collective::kAllGather, Algorithm::kRecursiveDoubling));
  EXPECT_FALSE(Streams(Collective::kAllReduce, Algorithm::kRecursiveDoubling));
}

// all_reduce on one host over TCP: Rabenseifner's 2 log2 n latencies and ring's bytes
// win at mid sizes on large worlds; recursive doubling keeps the small calls, the
// pipelined ring calls of more than four chunks, and a world just past a power of two
// pays two whole-vector transfers to fold, so the ring keeps it. Forced, it runs every
// world size, and it does not stream.
TEST(SelectorTest, MidSizedAllReducesOnLargeWorldsTakeRabenseifner) {
  const Selector s;
  const Choice mid = s.Choose(Collective::kAllReduce, 1 << 20, 64);
  EXPECT_EQ(mid.algorithm, Algorithm::kRabenseifner) << mid.reason;
  EXPECT_NE(mid.reason.find(", rabenseifner "), std::string::npos) << mid.reason;
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 1 << 20, 16).algorithm, Algorithm::kRabenseifner);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 8, 2).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 8, 64).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 1 << 20, 48).algorithm, Algorithm::kRing);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 64 << 20, 64).algorithm, Algorithm::kRing);
  const CostModel m;
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 64 << 20, 64), 0);
  EXPECT_GT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 2 << 20, 64), 0);  // four chunks
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 4 << 20, 64), 0);
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 1 << 20, 64),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRing, 1 << 20, 64));
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 1 << 20, 64),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 1 << 20, 64));
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 1 << 20, 64),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRabenseifner, 1 << 20, 63));

  SelectorConfig forced;
  forced.forced = ParseAlgorithm("Rabenseifner").value();
  EXPECT_EQ(forced.forced, Algorithm::kRabenseifner);
  EXPECT_EQ(Selector::Create(forced)->Choose(Collective::kAllReduce, 8, 3).algorithm, Algorithm::kRabenseifner);
  const Choice other = Selector::Create(forced)->Choose(Collective::kAllGather, 4096, 6);
  EXPECT_EQ(other.algorithm, Algorithm::kRing) << other.reason;
  EXPECT_STREQ(AlgorithmName(Algorithm::kRabenseifner), "rabenseifner");
  EXPECT_NE(ForceableAlgorithmNames().find("rabenseifner"), std::string::npos);
  EXPECT_FALSE(Streams(Collective::kAllReduce, Algorithm::kRabenseifner));
}

// The double binary tree: on large worlds of one host over TCP it takes the calls above
// Rabenseifner's four chunks, where the ring's 2(n-1) latencies dominate; recursive
// doubling keeps small calls (half the steps, and each of the tree's carries up to 4
// messages), Rabenseifner mid-sized ones, the ring large calls on few ranks. Its chunks are the
// model's and the algorithm's alike. Forced, it runs every world size; it does not stream.
TEST(SelectorTest, LargeWorldsTakeTheTreeAboveRabenseifner) {
  const Selector s;
  const Choice big = s.Choose(Collective::kAllReduce, 8 << 20, 1024);
  EXPECT_EQ(big.algorithm, Algorithm::kTree) << big.reason;
  EXPECT_NE(big.reason.find(", tree "), std::string::npos) << big.reason;
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 4 << 20, 1000).algorithm, Algorithm::kTree);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 512 << 10, 1000).algorithm, Algorithm::kRabenseifner);
  // On 3 ranks its 2 steps of 3 messages lose to the fold and one exchange (measured).
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 8, 3).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 8, 1000).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 64 << 20, 16).algorithm, Algorithm::kRing);
  const CostModel m;
  // The chunk: between kTreeMinChunkBytes and the tuning's, growing with the size.
  EXPECT_EQ(TreeChunkBytes(100, 1024, 512 << 10), kTreeMinChunkBytes);
  EXPECT_EQ(TreeChunkBytes(size_t{1} << 30, 2, 512 << 10), size_t{512} << 10);
  EXPECT_LT(TreeChunkBytes(1 << 20, 1024, 512 << 10), TreeChunkBytes(4 << 20, 1024, 512 << 10));
  EXPECT_EQ(TreeChunkBytes(1 << 20, 1024, 100), 100u);

  // Between many hosts, each its own link, the hierarchical all-reduce's step may be the
  // tree; between few, never (the ring's bytes with more steps).
  EXPECT_EQ(m.AcrossHosts(4 << 20, 1000, 1).first, Algorithm::kTree);
  EXPECT_NE(m.AcrossHosts(4 << 20, 4, 1).first, Algorithm::kTree);

  SelectorConfig forced;
  forced.forced = ParseAlgorithm("tree").value();
  EXPECT_EQ(Selector::Create(forced)->Choose(Collective::kAllReduce, 8, 3).algorithm, Algorithm::kTree);
  EXPECT_EQ(Selector::Create(forced)->Choose(Collective::kReduce, 8, 3).algorithm, Algorithm::kTree);
  EXPECT_FALSE(Streams(Collective::kAllReduce, Algorithm::kTree));
  EXPECT_TRUE(Streams(Collective::kReduce, Algorithm::kTree));
}

// The double tree's links: every rank has at most two children and one parent in each
// tree, both trees span every rank from their roots (0 and n-1), and a rank with
// children in one tree has none in the other (but the middle rank of an odd world,
// a leaf in both).
TEST(BinaryTreeTest, MirroredTreesShareNoInnerRank) {
  for (int n = 1; n <= 33; ++n) {
    for (int mirrored = 0; mirrored < 2; ++mirrored) {
      std::vector<int> parent_of(n, -2);
      for (int r = 0; r < n; ++r) {
        const TreeLinks t = BinaryTree(r, n, mirrored == 1);
        EXPECT_LE(t.children.size(), 2u);
        for (int c : t.children) {
          EXPECT_EQ(BinaryTree(c, n, mirrored == 1).parent, r) << "n=" << n;
          EXPECT_EQ(BinaryTreeDepth(c, n, mirrored == 1), BinaryTreeDepth(r, n, mirrored == 1) + 1);
        }
        parent_of[r] = t.parent;
      }
      const int root = mirrored == 1 ? n - 1 : 0;
      for (int r = 0; r < n; ++r) EXPECT_EQ(parent_of[r] < 0, r == root) << "n=" << n << " rank " << r;
    }
    for (int r = 0; r < n; ++r) {
      const bool inner_a = !BinaryTree(r, n, false).children.empty();
      const bool inner_b = !BinaryTree(r, n, true).children.empty();
      EXPECT_FALSE(inner_a && inner_b) << "n=" << n << " rank " << r;
      const bool middle = n % 2 == 1 && r == n / 2;
      EXPECT_EQ(inner_a || inner_b, n >= 2 && !middle) << "n=" << n << " rank " << r;
    }
  }
}

// A selector's view of hosts (equal ids: one host), shared memory within them, TCP
// between them.
SelectorConfig Placed(const std::vector<std::string>& host_ids) {
  SelectorConfig c;
  c.model.topology = Topology::FromHostIds(host_ids);
  c.model.intra = LinkKind::kShm;
  c.model.inter = LinkKind::kTcp;
  return c;
}

// The cost model: all_reduce on 2 hosts x 2 ranks (shared memory within, TCP between)
// takes recursive doubling for small messages and the hierarchical algorithm for large
// ones; the reason gives every candidate's prediction. On uneven hosts the
// hierarchical algorithm is never taken, even forced.
TEST(SelectorTest, AllReduceWeighsPredictedTimesOnTheTopology) {
  const SelectorConfig two_by_two = Placed({"a", "a", "b", "b"});
  const Selector s = *Selector::Create(two_by_two);
  EXPECT_EQ(s.Choose(Collective::kAllReduce, 8, 4).algorithm, Algorithm::kRecursiveDoubling);
  const Choice big = s.Choose(Collective::kAllReduce, 64 << 20, 4);
  EXPECT_EQ(big.algorithm, Algorithm::kHierarchical) << big.reason;
  for (const char* part : {"2 hosts x 2 ranks (shm within hosts, tcp between)", "predicted: ring ",
                           ", recursive_doubling ", ", hierarchical "}) {
    EXPECT_NE(big.reason.find(part), std::string::npos) << part << " in " << big.reason;
  }
  // The predictions agree with the choice: hierarchical's is the lowest.
  const CostModel& m = two_by_two.model;
  EXPECT_LT(m.PredictUs(Collective::kAllReduce, Algorithm::kHierarchical, 64 << 20, 4),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRing, 64 << 20, 4));
  // The flat ring carries 2(n-1)/n = 1.5 S over the network, the hierarchical S (plus
  // its steps within the hosts).
  const double ring = m.PredictUs(Collective::kAllReduce, Algorithm::kRing, 256 << 20, 4);
  const double hier = m.PredictUs(Collective::kAllReduce, Algorithm::kHierarchical, 256 << 20, 4);
  EXPECT_GT(ring / hier, 1.0);

  // Uneven hosts run it by leaders, and the model predicts that too.
  SelectorConfig uneven = Placed({"a", "a", "a", "b"});
  uneven.forced = Algorithm::kHierarchical;
  EXPECT_EQ(Selector::Create(uneven)->Choose(Collective::kAllReduce, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
  EXPECT_GT(uneven.model.PredictUs(Collective::kAllReduce, Algorithm::kHierarchical, 64 << 20, 4), 0);
  // One host: nothing to be hierarchical about, even forced.
  SelectorConfig one = Placed({"a", "a", "a", "a"});
  EXPECT_NE(Selector::Create(one)->Choose(Collective::kAllReduce, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
  one.forced = Algorithm::kHierarchical;
  const Choice u = Selector::Create(one)->Choose(Collective::kAllReduce, 64 << 20, 4);
  EXPECT_NE(u.algorithm, Algorithm::kHierarchical) << u.reason;
  EXPECT_NE(u.reason.find("CHORUS_ALGO=hierarchical cannot run all_reduce on 1 host x 4 ranks"), std::string::npos)
      << u.reason;
}

// Broadcast and all_gather on 2 hosts x 2 ranks weigh the hierarchical algorithms too,
// and take them for mid-sized (broadcast; from 16 MiB the flat chain, whose pipeline
// pays the network alone where each hierarchical segment pays it and then the host's
// link, as the bridges run the two steps in turn) and large messages; Explain lists them.
// All_gather on uneven hosts has none (forced: said so, and the flat choice runs);
// broadcast by leaders has.
TEST(SelectorTest, BroadcastAndAllGatherWeighTheHierarchicalOnes) {
  const SelectorConfig two_by_two = Placed({"a", "b", "a", "b"});
  const Selector s = *Selector::Create(two_by_two);
  const CostModel& m = two_by_two.model;
  for (Collective c : {Collective::kBroadcast, Collective::kAllGather}) {
    const size_t bytes = c == Collective::kBroadcast ? size_t{1} << 20 : size_t{64} << 20;
    const Choice chosen = s.Choose(c, bytes, 4, /*explain=*/true);
    EXPECT_NE(chosen.reason.find("hierarchical "), std::string::npos) << chosen.reason;
    const Algorithm flat = c == Collective::kBroadcast ? Algorithm::kChain : Algorithm::kRing;
    EXPECT_LT(m.PredictUs(c, Algorithm::kHierarchical, bytes, 4), m.PredictUs(c, flat, bytes, 4));
    if (c == Collective::kAllGather) {
      EXPECT_EQ(chosen.algorithm, Algorithm::kHierarchical) << chosen.reason;
    }
  }
  // The tree's root sends within its host and across at once (its near child over shared
  // memory): it beats the hierarchical broadcast, whose bridges take the two steps in
  // turn, and the chain, at every size above the agreement's.
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
    const Choice tree = s.Choose(Collective::kBroadcast, bytes, 4, /*explain=*/true);
    EXPECT_EQ(tree.algorithm, Algorithm::kTree) << tree.reason;
  }
  // Small broadcasts still ride the agreement.
  EXPECT_EQ(s.Choose(Collective::kBroadcast, 8, 4).algorithm, Algorithm::kDissemination);
  // The network carries S once per other host: less than the flat ring's (n-1)/n S.
  EXPECT_LT(m.PredictUs(Collective::kAllGather, Algorithm::kHierarchical, 256 << 20, 4),
            m.PredictUs(Collective::kAllGather, Algorithm::kRing, 256 << 20, 4));

  SelectorConfig uneven = Placed({"a", "a", "a", "b"});
  uneven.forced = Algorithm::kHierarchical;
  const Selector u = *Selector::Create(uneven);
  EXPECT_EQ(u.Choose(Collective::kBroadcast, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
  EXPECT_LT(uneven.model.PredictUs(Collective::kAllGather, Algorithm::kHierarchical, 64 << 20, 4), 0);
  const Choice ag = u.Choose(Collective::kAllGather, 64 << 20, 4, /*explain=*/true);
  EXPECT_EQ(ag.algorithm, Algorithm::kRing) << ag.reason;
  EXPECT_NE(ag.reason.find("CHORUS_ALGO=hierarchical cannot run all_gather on 2 hosts"), std::string::npos)
      << ag.reason;
  // One host: neither, not even predicted.
  SelectorConfig one = Placed({"a", "a", "a", "a"});
  for (Collective c : {Collective::kBroadcast, Collective::kAllGather}) {
    EXPECT_NE(Selector::Create(one)->Choose(c, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
    EXPECT_LT(one.model.PredictUs(c, Algorithm::kHierarchical, 64 << 20, 4), 0);
  }
}

// Reduce and reduce_scatter on 2 hosts x 2 ranks weigh the hierarchical algorithms:
// the flat ones are priced as crossing the network at every step, the hierarchical
// ones once (the reduce) or once per other host over a host's L connections at once
// (the reduce_scatter), so they are taken at every size; Explain lists them.
// Reduce_scatter on uneven hosts has none (forced: said so, and the ring runs); reduce by
// hosts' first ranks has. Links all alike: the flat tree wins the reduce's tie.
TEST(SelectorTest, ReduceAndReduceScatterWeighTheHierarchicalOnes) {
  const SelectorConfig two_by_two = Placed({"a", "b", "a", "b"});
  const Selector s = *Selector::Create(two_by_two);
  const CostModel& m = two_by_two.model;
  for (Collective c : {Collective::kReduce, Collective::kReduceScatter}) {
    const Algorithm flat = c == Collective::kReduce ? Algorithm::kTree : Algorithm::kRing;
    for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{64} << 20}) {
      const Choice chosen = s.Choose(c, bytes, 4, /*explain=*/true);
      EXPECT_EQ(chosen.algorithm, Algorithm::kHierarchical) << chosen.reason;
      EXPECT_NE(chosen.reason.find("hierarchical "), std::string::npos) << chosen.reason;
      EXPECT_NE(chosen.reason.find(std::string(AlgorithmName(flat)) + " "), std::string::npos) << chosen.reason;
      EXPECT_LT(m.PredictUs(c, Algorithm::kHierarchical, bytes, 4), m.PredictUs(c, flat, bytes, 4));
    }
  }

  // reduce_scatter's bytes are the whole input (CollectiveCall::bytes): the ring sends
  // (n-1)/n of it, half what the all_reduce ring sends.
  const size_t whole = size_t{64} << 20;
  EXPECT_LT(m.PredictUs(Collective::kReduceScatter, Algorithm::kRing, whole, 4),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRing, whole, 4));
  EXPECT_GT(m.PredictUs(Collective::kReduceScatter, Algorithm::kRing, whole, 4),
            m.PredictUs(Collective::kAllReduce, Algorithm::kRing, whole, 4) / 2);

  SelectorConfig uneven = Placed({"a", "a", "a", "b"});
  uneven.forced = Algorithm::kHierarchical;
  const Selector u = *Selector::Create(uneven);
  EXPECT_EQ(u.Choose(Collective::kReduce, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
  EXPECT_GT(uneven.model.PredictUs(Collective::kReduce, Algorithm::kHierarchical, 64 << 20, 4), 0);
  EXPECT_LT(uneven.model.PredictUs(Collective::kReduceScatter, Algorithm::kHierarchical, 64 << 20, 4), 0);
  const Choice rs = u.Choose(Collective::kReduceScatter, 64 << 20, 4, /*explain=*/true);
  EXPECT_EQ(rs.algorithm, Algorithm::kRing) << rs.reason;
  EXPECT_NE(rs.reason.find("CHORUS_ALGO=hierarchical cannot run reduce_scatter on 2 hosts"), std::string::npos)
      << rs.reason;

  SelectorConfig alike = two_by_two;
  alike.model.intra = LinkKind::kTcp;
  EXPECT_EQ(alike.model.PredictUs(Collective::kReduce, Algorithm::kHierarchical, 1 << 20, 4),
            alike.model.PredictUs(Collective::kReduce, Algorithm::kTree, 1 << 20, 4));
  EXPECT_EQ(Selector::Create(alike)->Choose(Collective::kReduce, 1 << 20, 4).algorithm, Algorithm::kTree);

  SelectorConfig one = Placed({"a", "a", "a", "a"});
  for (Collective c : {Collective::kReduce, Collective::kReduceScatter}) {
    EXPECT_NE(Selector::Create(one)->Choose(c, 64 << 20, 4).algorithm, Algorithm::kHierarchical);
    EXPECT_LT(one.model.PredictUs(c, Algorithm::kHierarchical, 64 << 20, 4), 0);
  }
}

TEST(TopologyTest, HostsInOrderOfTheirLowestRank) {
  const Topology t = Topology::FromHostIds({"y", "x", "y", "x", "z"});
  ASSERT_EQ(t.num_hosts(), 3);
  EXPECT_EQ(t.hosts[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(t.hosts[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(t.hosts[2], (std::vector<int>{4}));
  EXPECT_EQ(t.local_index[3], 1);
  EXPECT_FALSE(t.even());
  EXPECT_EQ(t.Describe(), "3 hosts (2, 2, 1 ranks)");
  const Topology e = Topology::FromHostIds({"a", "b", "a", "b"});
  EXPECT_TRUE(e.even());
  EXPECT_EQ(e.Rail(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(e.Describe(), "2 hosts x 2 ranks");
  // A rooted call's bridges: the root on its host; elsewhere the root's local index on
  // even hosts, else the host's first rank.
  EXPECT_EQ(e.Bridges(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(e.Bridges(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(t.Bridges(3), (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(t.Bridges(4), (std::vector<int>{0, 1, 4}));
}

// Device buffers: CUDA IPC only where every rank shares this host and nobody turned it
// off or found it impossible; otherwise the host algorithm, saying why not IPC.
TEST(SelectorTest, DeviceCallsTakeCudaIpcOnlyWhenAllRanksShareTheHost) {
  const Selector s;
  DevicePlacement local;
  local.all_on_this_host = true;
  Choice c = s.ChooseForDevice(Collective::kAllReduce, 64 << 20, 4, local);
  EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  EXPECT_NE(c.reason.find("all 4 ranks on this host"), std::string::npos) << c.reason;

  DevicePlacement remote;  // some rank elsewhere
  c = s.ChooseForDevice(Collective::kAllReduce, 64 << 20, 4, remote);
  EXPECT_EQ(c.algorithm, Algorithm::kRing) << c.reason;
  EXPECT_NE(c.reason.find("not every rank is on this host"), std::string::npos) << c.reason;

  DevicePlacement off = local;
  off.ipc_turned_off = "1";
  c = s.ChooseForDevice(Collective::kBroadcast, 1 << 20, 2, off);
  EXPECT_EQ(c.algorithm, Algorithm::kTree) << c.reason;
  EXPECT_NE(c.reason.find("CHORUS_CUDA_IPC=off on rank 1"), std::string::npos) << c.reason;

  DevicePlacement declined = local;
  declined.ipc_declined = "rank 1: no peer access";
  c = s.ChooseForDevice(Collective::kAllReduce, 8, 2, declined);
  EXPECT_EQ(c.algorithm, Algorithm::kRecursiveDoubling) << c.reason;
  EXPECT_NE(c.reason.find("rank 1: no peer access"), std::string::npos) << c.reason;

  // Ranks sharing a GPU without MPS: staged up to 1 MiB, CUDA IPC above.
  DevicePlacement sliced = local;
  sliced.gpu_time_sliced = "ranks 0, 1 share GPU-1234 without MPS";
  c = s.ChooseForDevice(Collective::kAllReduce, kTimeSlicedStagedMaxBytes, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kRing) << c.reason;
  EXPECT_NE(c.reason.find("ranks 0, 1 share GPU-1234 without MPS"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("staging up to 1 MiB"), std::string::npos) << c.reason;
  c = s.ChooseForDevice(Collective::kAllGather, 4096, 2, sliced);
  EXPECT_NE(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  c = s.ChooseForDevice(Collective::kAllReduce, kTimeSlicedStagedMaxBytes + 1, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  // The stream form: staged up to 256 KiB where every rank stages it with signal flags;
  // behind the semaphore (whose kernel spins, taking the peer's turns) CUDA IPC at every size.
  sliced.stream_form = true;
  sliced.every_rank_signals = true;
  c = s.ChooseForDevice(Collective::kAllReduce, kTimeSlicedStreamStagedMaxBytes, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kRing) << c.reason;
  EXPECT_NE(c.reason.find("staging up to 256 KiB (stream form, signal flags on every rank)"), std::string::npos)
      << c.reason;
  c = s.ChooseForDevice(Collective::kBroadcast, 8, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kDissemination) << c.reason;
  c = s.ChooseForDevice(Collective::kAllReduce, kTimeSlicedStreamStagedMaxBytes + 1, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  sliced.every_rank_signals = false;
  c = s.ChooseForDevice(Collective::kAllReduce, 8, 2, sliced);
  EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  // Where CUDA IPC calls order the streams with flags, time slicing stages nothing.
  sliced.every_rank_signals = true;
  sliced.ipc_flags = true;
  for (bool stream_form : {false, true}) {
    sliced.stream_form = stream_form;
    c = s.ChooseForDevice(Collective::kAllReduce, 8, 2, sliced);
    EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  }
  // Signal flags without time slicing change nothing.
  DevicePlacement signals_only = local;
  signals_only.stream_form = signals_only.every_rank_signals = true;
  c = s.ChooseForDevice(Collective::kAllReduce, 8, 2, signals_only);
  EXPECT_EQ(c.algorithm, Algorithm::kCudaIpc) << c.reason;

  c = s.ChooseForDevice(Collective::kAllReduce, 8, 1, local);
  EXPECT_NE(c.algorithm, Algorithm::kCudaIpc) << c.reason;
  EXPECT_STREQ(AlgorithmName(Algorithm::kCudaIpc), "cuda_ipc");
}

}  // namespace
}  // namespace chorus::algos
