#include "algos/input_order.h"

#include "algos/chunking.h"

namespace chorus::algos {

ByteRanges InputReadOrder(Collective c, Algorithm a, int rank, int n, size_t count, DataType dtype) {
  const size_t es = DataTypeSize(dtype);
  ByteRanges order;
  if (c == Collective::kAllReduce && a == Algorithm::kRing) {
    for (int s = 0; s < n; ++s) {  // blocks r, r-1, ...: the block sent at step 0 is our own
      const Span b = EvenBlock(count, n, Mod(rank - s, n));
      order.emplace_back(b.offset * es, b.count * es);
    }
  } else if (c == Collective::kReduceScatter && a == Algorithm::kRing) {
    for (int s = 1; s <= n; ++s) order.emplace_back(static_cast<size_t>(Mod(rank - s, n)) * count * es, count * es);
  } else if (c == Collective::kAllToAll && a == Algorithm::kPairwise) {
    for (int s = 1; s <= n; ++s) order.emplace_back(static_cast<size_t>((rank + s) % n) * count * es, count * es);
  }
  return order;
}

}  // namespace chorus::algos
