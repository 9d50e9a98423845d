// Helpers for the kernel tests: guarded (poisoned) buffers at any misalignment, raw
// element access by DataType, random inputs with special values mixed in, and the
// expected result of each kernel computed with reference.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/types.h"
#include "tests/kernels/reference.h"

namespace chorus {
namespace kernels {
namespace testing {

constexpr DataType kAllDataTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                      DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
constexpr size_t kOddLengths[] = {0, 1, 7, 15, 31, 33, 1023, 4099};

// `bytes` of storage starting `misalign` bytes past a 64-byte boundary, surrounded by
// guard bytes holding a poison pattern (the data area starts poisoned as well).
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kPoison = 0xA5;

  GuardedBuffer(size_t bytes, size_t misalign) : bytes_(bytes), mem_(bytes + 2 * kGuard + 128, kPoison) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(mem_.data()) + kGuard;
    data_ = reinterpret_cast<uint8_t*>((base + 63) / 64 * 64 + misalign);
  }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // True when no byte outside [data, data + bytes) changed.
  bool GuardsIntact() const {
    for (const uint8_t* p = mem_.data(); p < data_; ++p) {
      if (*p != kPoison) return false;
    }
    for (const uint8_t* p = data_ + bytes_; p < mem_.data() + mem_.size(); ++p) {
      if (*p != kPoison) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<uint8_t> mem_;
  uint8_t* data_;
};

inline bool IsFloatType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}
inline int BitWidth(DataType t) { return static_cast<int>(DataTypeSize(t) * 8); }

inline uint64_t LoadBits(DataType t, const uint8_t* base, size_t i) {
  uint64_t v = 0;
  memcpy(&v, base + i * DataTypeSize(t), DataTypeSize(t));  // little-endian host
  return v;
}
inline void StoreBits(DataType t, uint8_t* base, size_t i, uint64_t v) {
  memcpy(base + i * DataTypeSize(t), &v, DataTypeSize(t));
}

inline double DecodeFloat(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::kFloat32: return FloatOfBits(static_cast<uint32_t>(bits));
    case DataType::kFloat64: {
      double d;
      memcpy(&d, &bits, 8);
      return d;
    }
    case DataType::kFloat16: return RefDecode(static_cast<uint32_t>(bits), kHalfFormat);
    case DataType::kBFloat16: return RefDecode(static_cast<uint32_t>(bits), kBFloat16Format);
    default: return 0;
  }
}

// Rounds a non-NaN double into `t` (fp32: the hardware's double->float, RNE).
inline uint64_t EncodeFloat(DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: return FloatBitsOf(static_cast<float>(v));
    case DataType::kFloat64: return DoubleBitsOf(v);
    case DataType::kFloat16: return RefEncode(v, kHalfFormat);
    case DataType::kBFloat16: return RefEncode(v, kBFloat16Format);
    default: return 0;
  }
}

inline uint64_t QuietNaNBits(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 0x7FC00000u;
    case DataType::kFloat64: return 0x7FF8000000000000u;
    case DataType::kFloat16: return 0x7E00u;
    case DataType::kBFloat16: return 0x7FC0u;
    default: return 0;
  }
}

inline int64_t DecodeInt(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::kInt8: return static_cast<int8_t>(bits);
    case DataType::kUint8: return static_cast<uint8_t>(bits);
    case DataType::kInt32: return static_cast<int32_t>(bits);
    case DataType::kInt64: return static_cast<int64_t>(bits);
    default: return 0;
  }
}
inline uint64_t EncodeInt(DataType t, int64_t v) {
  const int bits = BitWidth(t);
  return bits == 64 ? static_cast<uint64_t>(v) : (static_cast<uint64_t>(v) & ((uint64_t{1} << bits) - 1));
}

// An expected element: its exact bits, or "any NaN".
struct Expected {
  uint64_t bits;
  bool nan;
};

// Empty when `got` matches, else a description of the mismatch.
inline std::string Mismatch(DataType t, uint64_t got, Expected want) {
  if (want.nan) {
    if (IsFloatType(t) && std::isnan(DecodeFloat(t, got))) return "";
  } else if (got == want.bits) {
    return "";
  }
  char buf[160];
  snprintf(buf, sizeof(buf), "got 0x%llx, want %s0x%llx", static_cast<unsigned long long>(got),
           want.nan ? "NaN, e.g. " : "", static_cast<unsigned long long>(want.bits));
  return buf;
}

inline Expected RefBinary(DataType t, ReduceOp op, uint64_t x, uint64_t y) {
  if (IsFloatType(t)) {
    // Double holds every fp16/bf16/fp32 sum and product closely enough that rounding
    // it once more gives the correctly rounded result (53 >= 2p + 2).
    const double v = RefFloatOp(op, DecodeFloat(t, x), DecodeFloat(t, y));
    if (std::isnan(v)) return {0, true};
    return {EncodeFloat(t, v), false};
  }
  const bool is_signed = t != DataType::kUint8;
  return {EncodeInt(t, RefIntOp(op, DecodeInt(t, x), DecodeInt(t, y), BitWidth(t), is_signed)), false};
}

// inputs[0] op inputs[1] op ... left to right, fp16/bf16/fp32 accumulating in float
// and rounding once at the end (the documented ReduceN semantics).
inline Expected RefNAry(DataType t, ReduceOp op, const std::vector<uint64_t>& xs) {
  if (IsFloatType(t)) {
    const bool in_float = t != DataType::kFloat64;
    double acc = DecodeFloat(t, xs[0]);
    if (in_float) acc = static_cast<float>(acc);
    for (size_t k = 1; k < xs.size(); ++k) {
      acc = RefFloatOp(op, acc, DecodeFloat(t, xs[k]));
      if (in_float) acc = static_cast<float>(acc);  // a float op == double op rounded to float
    }
    if (std::isnan(acc)) return {0, true};
    return {EncodeFloat(t, acc), false};
  }
  const bool is_signed = t != DataType::kUint8;
  int64_t acc = DecodeInt(t, xs[0]);
  for (size_t k = 1; k < xs.size(); ++k) acc = RefIntOp(op, acc, DecodeInt(t, xs[k]), BitWidth(t), is_signed);
  return {EncodeInt(t, acc), false};
}

inline Expected RefScale(DataType t, uint64_t x, int n) {
  if (t == DataType::kFloat64) {
    const double v = DecodeFloat(t, x) * (1.0 / n);
    return std::isnan(v) ? Expected{0, true} : Expected{EncodeFloat(t, v), false};
  }
  if (IsFloatType(t)) {
    const float v = static_cast<float>(DecodeFloat(t, x)) * (1.0f / static_cast<float>(n));
    return std::isnan(v) ? Expected{0, true} : Expected{EncodeFloat(t, v), false};
  }
  return {EncodeInt(t, RefTruncDiv(DecodeInt(t, x), n)), false};
}

// Random element bits: for float types a mix of special values (NaN, inf, zeros,
// subnormals, extremes), arbitrary bit patterns and moderate numbers; for integers
// uniform bits with the extremes mixed in.
inline uint64_t RandomElement(DataType t, std::mt19937_64& rng) {
  const uint64_t raw = rng();
  const int bits = BitWidth(t);
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const unsigned pick = static_cast<unsigned>(rng() % 100);
  if (!IsFloatType(t)) {
    if (pick < 10) {
      const uint64_t top = uint64_t{1} << (bits - 1);
      const uint64_t extremes[] = {0, 1, mask, top, top - 1, top + 1};
      return extremes[raw % 6] & mask;
    }
    return raw & mask;
  }
  if (pick < 8) {
    const double specials[] = {
        std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), 0.0, -0.0, 1.0, -1.0};
    if (raw % 7 == 6) return QuietNaNBits(t);
    return EncodeFloat(t, specials[raw % 7]);
  }
  if (pick < 12) {  // the smallest subnormal and the largest finite value of the type
    const uint64_t exp_all = t == DataType::kFloat32   ? 0x7F800000u
                             : t == DataType::kFloat64 ? 0x7FF0000000000000u
                             : t == DataType::kFloat16 ? 0x7C00u
                                                       : 0x7F80u;
    const uint64_t sign = uint64_t{1} << (bits - 1);
    const uint64_t v = (raw & 2) ? 1 : exp_all - 1;
    return (raw & 1) ? (v | sign) : v;
  }
  if (pick < 40) return raw & mask;
  std::uniform_real_distribution<double> unit(-4.0, 4.0);
  return EncodeFloat(t, std::ldexp(unit(rng), static_cast<int>(rng() % 7) - 3));
}

}  // namespace testing
}  // namespace kernels
}  // namespace chorus
