// Reference arithmetic for the kernel tests, derived independently of kernels/: float
// formats are decoded and rounded through double with ldexp/frexp/nearbyint (the
// default rounding mode is round-to-nearest-even), integers wrap through explicit
// masks. Nothing here calls kernels/elementwise.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/types.h"

namespace chorus {
namespace kernels {
namespace testing {

// A binary floating-point format with an implicit leading one: fp16 is {5, 10},
// bf16 is {8, 7}.
struct FloatFormat {
  int exp_bits;
  int mant_bits;
  int Bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t ExpMask() const { return (1u << exp_bits) - 1u; }
  uint32_t SignBit() const { return 1u << (exp_bits + mant_bits); }
};
constexpr FloatFormat kHalfFormat{5, 10};
constexpr FloatFormat kBFloat16Format{8, 7};

inline double RefDecode(uint32_t bits, FloatFormat f) {
  const bool neg = (bits & f.SignBit()) != 0;
  const uint32_t e = (bits >> f.mant_bits) & f.ExpMask();
  const uint32_t m = bits & ((1u << f.mant_bits) - 1u);
  double v;
  if (e == f.ExpMask()) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.Bias() - f.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.mant_bits) + m), static_cast<int>(e) - f.Bias() - f.mant_bits);
  }
  return neg ? -v : v;
}

// Rounds a non-NaN double to the nearest value of the format, ties to even.
inline uint32_t RefEncode(double v, FloatFormat f) {
  const uint32_t sign = std::signbit(v) ? f.SignBit() : 0u;
  const double a = std::fabs(v);
  const int emax = f.Bias();
  const int emin = 1 - f.Bias();
  // Halfway between the largest finite value and 2^(emax+1) rounds up (odd mantissa).
  const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -(f.mant_bits + 1)), emax);
  if (a >= overflow) return sign | (f.ExpMask() << f.mant_bits);
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);  // a = frac * 2^e2, frac in [0.5, 1)
  const int e = std::max(e2 - 1, emin);
  const int quantum = e - f.mant_bits;
  const double units = std::nearbyint(std::ldexp(a, -quantum));
  if (units == 0) return sign;
  const double r = std::ldexp(units, quantum);
  std::frexp(r, &e2);
  const int re = e2 - 1;
  if (re < emin) return sign | static_cast<uint32_t>(units);  // subnormal
  const double mant = std::ldexp(r, -re) - 1.0;               // in [0, 1)
  return sign | (static_cast<uint32_t>(re + f.Bias()) << f.mant_bits) |
         static_cast<uint32_t>(std::ldexp(mant, f.mant_bits));
}

inline uint32_t FloatBitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float FloatOfBits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint64_t DoubleBitsOf(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

// The op on doubles, with the library's documented NaN and equal-inputs choices.
inline double RefFloatOp(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
      return a > b ? a : b;
    case ReduceOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
      return a < b ? a : b;
  }
  return 0;
}

// The op on integers of `bits` width (two's complement, wrapping); returns the
// result sign-extended (or zero-extended when !is_signed) to 64 bits.
inline int64_t RefIntOp(ReduceOp op, int64_t a, int64_t b, int bits, bool is_signed) {
  uint64_t r = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: r = static_cast<uint64_t>(a) + static_cast<uint64_t>(b); break;
    case ReduceOp::kProd: r = static_cast<uint64_t>(a) * static_cast<uint64_t>(b); break;
    case ReduceOp::kMax: return a > b ? a : b;
    case ReduceOp::kMin: return a < b ? a : b;
  }
  if (bits < 64) {
    const uint64_t mask = (uint64_t{1} << bits) - 1;
    r &= mask;
    if (is_signed && (r >> (bits - 1)) != 0) r |= ~mask;
  }
  return static_cast<int64_t>(r);
}

// Integer division truncating toward zero, written without the `/` of a signed type.
inline int64_t RefTruncDiv(int64_t x, int n) {
  const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const uint64_t q = mag / static_cast<uint64_t>(n);
  return x < 0 ? -static_cast<int64_t>(q) : static_cast<int64_t>(q);
}

}  // namespace testing
}  // namespace kernels
}  // namespace chorus
