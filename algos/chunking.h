// How collectives cut a buffer: into one block per rank, and each block into chunks,
// the unit that is sent, received and reduced at once (so that the wire, the
// reduction and the next send overlap).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace chorus::algos {

// A range of elements [offset, offset + count).
struct Span {
  size_t offset = 0;
  size_t count = 0;
};

// Non-negative a mod n (rank arithmetic around a ring).
inline int Mod(int a, int n) { return ((a % n) + n) % n; }
inline bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// A world of n ranks as recursive doubling and Rabenseifner run it: p = 2^rounds, the
// largest power of two <= n, and the n - p extra ranks that fold in first.
struct PowerOfTwoFold {
  int p = 1;
  int rounds = 0;
  int extra = 0;
};
inline PowerOfTwoFold FoldOf(int n) {
  PowerOfTwoFold f;
  while (f.p * 2 <= n) {
    f.p *= 2;
    ++f.rounds;
  }
  f.extra = n - f.p;
  return f;
}

// Block i of `count` elements split over n ranks: count/n elements each, the first
// count%n blocks one more. With count < n the last blocks are empty.
inline Span EvenBlock(size_t count, int n, int i) {
  const size_t base = count / static_cast<size_t>(n);
  const size_t rem = count % static_cast<size_t>(n);
  const size_t idx = static_cast<size_t>(i);
  return Span{idx * base + std::min(idx, rem), base + (idx < rem ? 1 : 0)};
}

// Block i as EvenBlock splits whole units of `unit` elements (the last unit may be
// short): every block starts at a multiple of `unit`, so blocks of an aligned buffer
// stay aligned for vector loads.
inline Span UnitBlock(size_t count, int n, int i, size_t unit) {
  const Span units = EvenBlock((count + unit - 1) / unit, n, i);
  const size_t begin = std::min(units.offset * unit, count);
  return Span{begin, std::min((units.offset + units.count) * unit, count) - begin};
}

// Elements per chunk for a chunk size in bytes; never zero.
inline size_t ChunkElems(size_t chunk_bytes, size_t elem_size) { return std::max<size_t>(1, chunk_bytes / elem_size); }

// The hierarchical broadcast's segment, the unit its two steps overlap in: this many
// chunks (more cost each segment its latencies, fewer leave the steps one after the other).
constexpr size_t kHierarchicalSegmentChunks = 4;
inline size_t HierarchicalSegmentElems(size_t chunk_bytes, size_t elem_size) {
  const size_t chunk = ChunkElems(chunk_bytes, elem_size);
  return chunk > SIZE_MAX / kHierarchicalSegmentChunks ? SIZE_MAX : chunk * kHierarchicalSegmentChunks;
}

// Chunks of a span. An empty span still has one (empty) chunk: every rank then
// exchanges the same messages whatever the count, so a rank that called with
// count 0 while a peer called with count 10 meets a fingerprint mismatch instead of
// leaving the peer waiting for a message that never comes.
inline size_t NumChunks(size_t count, size_t chunk_elems) {
  return count == 0 ? 1 : (count + chunk_elems - 1) / chunk_elems;
}

// Chunk c of `block`.
inline Span ChunkOf(Span block, size_t chunk_elems, size_t c) {
  const size_t start = std::min(block.count, c * chunk_elems);
  return Span{block.offset + start, std::min(chunk_elems, block.count - start)};
}

// Walks the (step, chunk) pairs of a schedule in order: every chunk of step 0's
// block, then every chunk of step 1's, ... `block_of_step` says which span a step
// moves. Both ends of a link walk the same sequence, so the n-th message matches.
class ChunkWalk {
 public:
  ChunkWalk(int steps, size_t chunk_elems, std::function<Span(int)> block_of_step)
      : steps_(steps), chunk_elems_(chunk_elems), block_of_step_(std::move(block_of_step)) {
    if (steps_ > 0) Enter(0);
  }
  bool done() const { return step_ >= steps_; }
  int step() const { return step_; }
  Span chunk() const { return ChunkOf(block_, chunk_elems_, chunk_); }
  void Next() {
    if (++chunk_ < nchunks_) return;
    if (step_ + 1 < steps_) {
      Enter(step_ + 1);
    } else {
      step_ = steps_;
    }
  }

 private:
  void Enter(int step) {
    step_ = step;
    block_ = block_of_step_(step);
    chunk_ = 0;
    nchunks_ = NumChunks(block_.count, chunk_elems_);
  }

  const int steps_;
  const size_t chunk_elems_;
  const std::function<Span(int)> block_of_step_;
  int step_ = 0;
  Span block_;
  size_t chunk_ = 0;
  size_t nchunks_ = 0;
};

}  // namespace chorus::algos
