// Fresh inputs for collective tests and the scalar reference their results are
// checked against. Every case draws its own values from a seed (a hash of what the
// case is), so a result left over from an earlier call, or taken from the wrong
// rank or block, never passes by accident.
//
// Reductions: element i of a rank's input is a function of (seed, rank, i, dtype,
// op). Integers use their whole range (sums and products wrap, as the kernels
// define it) mixed with small values, and are compared exactly; floating point uses
// fractional values in ranges that cannot overflow and is compared within the
// rounding a sum or product of n terms may accumulate in that dtype (MAX/MIN:
// exactly). The reference is computed in double / in the integer's own modular
// arithmetic, one element at a time.
//
// Data movement (broadcast, gathers, scatters, all_to_all): opaque bytes, a function
// of (seed, rank, byte offset), compared bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace chorus::testing {

// A seed from the values that identify a case (any number of them).
uint64_t SeedOf(std::initializer_list<uint64_t> parts);

// Room for `count` elements of `dtype`; data() is never null (one spare byte).
class TypedBuffer {
 public:
  TypedBuffer(DataType dtype, size_t count) : dtype_(dtype), count_(count), bytes_(count * DataTypeSize(dtype) + 1) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  // Element `i`'s first byte.
  char* at(size_t i) { return reinterpret_cast<char*>(bytes_.data()) + i * DataTypeSize(dtype_); }
  const char* at(size_t i) const { return reinterpret_cast<const char*>(bytes_.data()) + i * DataTypeSize(dtype_); }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * DataTypeSize(dtype_); }
  DataType dtype() const { return dtype_; }
  // Fills every byte with a pattern, so that elements a collective should have
  // written but did not are caught.
  void Poison();

 private:
  DataType dtype_;
  size_t count_;
  std::vector<unsigned char> bytes_;
};

// Writes `count` elements of `rank`'s reduction input, elements [first, first + count)
// of its input vector, to dst.
void FillReductionInput(DataType t, ReduceOp op, uint64_t seed, int rank, size_t first, size_t count, void* dst);

// Checks `count` elements at `got` against op over the inputs of `ranks` (in that
// order; AVG divides by ranks.size()) at elements [first, first + count). The error
// names the first wrong element, what it holds and what it should.
Status CheckReduction(DataType t, ReduceOp op, uint64_t seed, const std::vector<int>& ranks, size_t first, size_t count,
                      const void* got);
// The same over ranks 0 .. n-1.
Status CheckReduction(DataType t, ReduceOp op, uint64_t seed, int n, size_t first, size_t count, const void* got);

// Writes bytes [first_byte, first_byte + bytes) of `rank`'s data to dst.
void FillBytes(uint64_t seed, int rank, size_t first_byte, size_t bytes, void* dst);
// Checks that `got` holds bytes [first_byte, first_byte + bytes) of `rank`'s data.
Status CheckBytes(uint64_t seed, int rank, size_t first_byte, size_t bytes, const void* got);

// Whether two results are bit-identical (what every rank of an all_reduce must hold);
// the error names the first differing byte.
Status CheckSameBytes(const void* a, const void* b, size_t bytes);

bool IsFloat(DataType t);

}  // namespace chorus::testing
