// The trees that broadcast and reduce run on, rooted at any rank: the binomial tree,
// and the chain (a tree of one child per rank) that large broadcasts take.
//
// Virtual rank v = (rank - root) mod n puts the root at 0. Binomial: the parent of v > 0
// is v with its lowest set bit cleared; the children of v are v + 2^k for every 2^k
// below v's lowest set bit (every 2^k < n for the root), if < n. Depth is ceil(log2 n).
// Chain: the parent of v > 0 is v - 1, the child of v < n - 1 is v + 1.
#pragma once

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

}  // namespace chorus::algos
