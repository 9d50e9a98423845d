// The trees that broadcast and reduce run on, rooted at any rank: the binomial tree,
// and the chain (a tree of one child per rank) that large broadcasts take; and the two
// binary trees of the tree all-reduce (allreduce_tree.cc).
//
// Virtual rank v = (rank - root) mod n puts the root at 0. Binomial: the parent of v > 0
// is v with its lowest set bit cleared; the children of v are v + 2^k for every 2^k
// below v's lowest set bit (every 2^k < n for the root), if < n. Depth is ceil(log2 n).
// Chain: the parent of v > 0 is v - 1, the child of v < n - 1 is v + 1.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "algos/chunking.h"

namespace chorus::algos {

struct TreeLinks {
  int parent = -1;            // real rank; -1 at the root
  std::vector<int> children;  // real ranks, largest subtree first (it has the longest way to go)
};

inline TreeLinks BinomialTree(int rank, int root, int n) {
  TreeLinks t;
  const int v = Mod(rank - root, n);
  int limit = 1;  // children are v + 2^k for 2^k < limit
  if (v == 0) {
    while (limit < n) limit <<= 1;
  } else {
    limit = v & -v;
    t.parent = Mod(v - limit + root, n);
  }
  for (int bit = limit >> 1; bit >= 1; bit >>= 1) {
    if (v + bit < n) t.children.push_back(Mod(v + bit + root, n));
  }
  return t;
}

inline TreeLinks ChainLinks(int rank, int root, int n) {
  TreeLinks t;
  const int v = Mod(rank - root, n);
  if (v > 0) t.parent = Mod(v - 1 + root, n);
  if (v + 1 < n) t.children.push_back(Mod(v + 1 + root, n));
  return t;
}

// Binary trees in heap order: virtual rank v has parent (v - 1) / 2 and children 2v + 1,
// 2v + 2 (if < n), depth floor(log2 n). The first tree has v = rank, the mirrored one
// v = n - 1 - rank: the inner ranks of the first (v < n / 2 roughly) are the leaves of
// the second and the other way round, so each rank forwards data in at most one of them.
inline TreeLinks BinaryTree(int rank, int n, bool mirrored) {
  TreeLinks t;
  const auto real = [&](int v) { return mirrored ? n - 1 - v : v; };
  const int v = real(rank);  // the mirror is its own inverse
  if (v > 0) t.parent = real((v - 1) / 2);
  for (int c = 2 * v + 1; c <= 2 * v + 2 && c < n; ++c) t.children.push_back(real(c));
  return t;
}
// How many links rank's virtual rank v is below the root of a heap-ordered tree.
inline int BinaryTreeDepth(int rank, int n, bool mirrored) {
  int v = (mirrored ? n - 1 - rank : rank) + 1, d = 0;
  while (v > 1) {
    v >>= 1;
    ++d;
  }
  return d;
}

// The double tree's busiest rank, per chunk of each tree: it sends one up and two down
// in the tree where it is inner and one up in the other (fewer on up to 4 ranks).
inline int TreeSendsPerChunk(int n) { return n <= 2 ? 2 : n <= 4 ? 3 : 4; }

// The tree all-reduce's chunk for `bytes` per tree on n ranks: a call takes about
// 2 depth + C - 1 chunk times for C chunks, each k messages of a chunk (k =
// TreeSendsPerChunk), least where a chunk is
// sqrt(bytes * latency * bandwidth / (2 depth - 1)). kTreeLatencyBytes stands for
// latency * bandwidth (of the order of 16 KiB on shm and TCP alike, algos/cost_model.cc);
// at least kTreeMinChunkBytes, at most `max_chunk` (the tuning's).
constexpr size_t kTreeLatencyBytes = 16 << 10;
constexpr size_t kTreeMinChunkBytes = 1 << 10;
inline size_t TreeChunkBytes(size_t bytes, int n, size_t max_chunk) {
  int depth = 0;
  while ((2 << depth) <= n) ++depth;
  const double per = std::max(1, 2 * depth - 1);
  const double best = std::sqrt(static_cast<double>(bytes) * kTreeLatencyBytes / per);
  const size_t chunk = std::max(kTreeMinChunkBytes, static_cast<size_t>(best) / 64 * 64);
  return std::max<size_t>(1, std::min(chunk, max_chunk));
}

}  // namespace chorus::algos
