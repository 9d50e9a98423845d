// Element-wise building blocks of every reduction: the SUM/PROD/MAX/MIN functors and
// the fp16/bf16 <-> float conversions. Header-only and free of host-only calls so the
// same code compiles into the CPU kernels and, later, into CUDA kernels.
//
// Semantics (identical on every path, so results are bit-exact across them):
// - Integers wrap on overflow: the arithmetic is done in the unsigned type of the same
//   width (well defined), then converted back (modular, as GCC/Clang/NVCC define it).
// - MAX/MIN on floating point propagate NaN: if either input is NaN the result is NaN
//   (PyTorch's torch.maximum behaves the same; IEEE maxNum would hide a diverged
//   rank's NaN instead). When `a` is NaN it is returned, else when `b` is NaN it is
//   returned. When the inputs compare equal (+0 and -0) the result is `b`, which is
//   what x86 MAXPS/MINPS do, so the vector path needs no fix-up.
// - fp16/bf16 are computed in float: convert, apply the op, round back once
//   (round-to-nearest-even). For one op on two inputs this equals the correctly
//   rounded result because float has at least 2p+2 bits for both formats.
// - Conversions follow x86 F16C: half->float is exact (subnormals included) and sets
//   the quiet bit of a NaN; float->half rounds to nearest even, overflows to inf, and
//   keeps a NaN's sign and top payload bits with the quiet bit set. bf16->float is a
//   shift; float->bf16 rounds to nearest even, NaN keeps its top bits made quiet.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif

// Everything inline in kernels/ is compiled both into the portable translation units
// and into the AVX2 one (built with -mavx2). The ISA-tagged inline namespace gives each
// build its own mangled names, so the linker can never hand the portable path an
// out-of-line copy that contains AVX2 instructions. The AVX2 library defines
// CHORUS_KERNELS_ISA=isa_avx2; users see plain chorus::kernels names.
#ifndef CHORUS_KERNELS_ISA
#define CHORUS_KERNELS_ISA isa_portable
#endif

namespace chorus {
namespace kernels {
inline namespace CHORUS_KERNELS_ISA {

// Storage types of the 16-bit float formats (bit patterns; arithmetic goes via float).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

CHORUS_HD inline uint32_t FloatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
CHORUS_HD inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

CHORUS_HD inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  // inf, or NaN made quiet
  const uint32_t special = sign | 0x7F800000u | (man << 13) | (man != 0 ? 0x00400000u : 0u);
#if defined(__CUDA_ARCH__)
  // The GPU's conversion instruction (exact, as below) for everything but inf and NaN,
  // chosen without a branch: a branch per element slowed fp16 reductions well below
  // the copy bandwidth (docs/design/kernels.md).
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return exp == 0x1F ? BitsToFloat(special) : f;
#else
  if (exp == 0x1F) return BitsToFloat(special);
  if (exp != 0) return BitsToFloat(sign | ((exp + 112u) << 23) | (man << 13));  // rebias 15 -> 127
  if (man == 0) return BitsToFloat(sign);
  // Subnormal half (man * 2^-24) is a normal float: shift the leading one into place.
  uint32_t e = 113;  // biased float exponent of 2^-14
  while ((man & 0x400u) == 0) {
    man <<= 1;
    --e;
  }
  return BitsToFloat(sign | (e << 23) | ((man & 0x3FFu) << 13));
#endif
}

CHORUS_HD inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  const uint16_t nan = static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));  // quiet, payload kept
#if defined(__CUDA_ARCH__)
  // Round to nearest even in hardware, overflow to inf, subnormals kept: what follows
  // computes, for everything but NaN (whose payload rule is ours); no branch (above).
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return ax > 0x7F800000u ? nan : h;
#else
  if (ax > 0x7F800000u) return nan;
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (incl. inf)
  if (ax >= 0x38800000u) {  // normal half (>= 2^-14): round at mantissa bit 13, rebias
    const uint32_t rounded = ax + 0x0FFFu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (ax < 0x33000000u) return sign;  // below 2^-25 (or exactly it, a tie to even 0)
  // Subnormal half: the result counts units of 2^-24; value = m * 2^(e - 150).
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // may carry into 0x400: fine
  return static_cast<uint16_t>(sign | q);
#endif
}

CHORUS_HD inline float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

CHORUS_HD inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// How a storage type is computed on: Load widens, Store narrows (rounding once).
template <typename S>
struct StorageTraits {
  using Compute = S;
  CHORUS_HD static Compute Load(S v) { return v; }
  CHORUS_HD static S Store(Compute v) { return v; }
};
template <>
struct StorageTraits<Half> {
  using Compute = float;
  CHORUS_HD static float Load(Half v) { return HalfToFloat(v.bits); }
  CHORUS_HD static Half Store(float v) { return Half{FloatToHalf(v)}; }
};
template <>
struct StorageTraits<BFloat16> {
  using Compute = float;
  CHORUS_HD static float Load(BFloat16 v) { return BFloat16ToFloat(v.bits); }
  CHORUS_HD static BFloat16 Store(float v) { return BFloat16{FloatToBFloat16(v)}; }
};

namespace detail {
// Unsigned type at least as wide as `unsigned`, so 8/16-bit values do not promote to
// (signed, overflowing) int in a product.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
}  // namespace detail

struct SumOp {
  template <typename T>
  CHORUS_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      using W = detail::WrapType<T>;
      return static_cast<T>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  CHORUS_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      using W = detail::WrapType<T>;
      return static_cast<T>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
    } else {
      return a * b;
    }
  }
};

struct MaxOp {
  template <typename T>
  CHORUS_HD T operator()(T a, T b) const {
    if constexpr (!std::is_integral<T>::value) {
      if (a != a) return a;  // NaN propagates; a NaN `b` falls through (a > NaN is false)
    }
    return a > b ? a : b;
  }
};

struct MinOp {
  template <typename T>
  CHORUS_HD T operator()(T a, T b) const {
    if constexpr (!std::is_integral<T>::value) {
      if (a != a) return a;
    }
    return a < b ? a : b;
  }
};

// AVG = SUM, then once at the end x * (1/n) for floating point (in float for
// fp32/fp16/bf16, in double for fp64) and x / n for integers (C++ division: truncates
// toward zero, so -7 / 2 == -3).
template <typename C>
CHORUS_HD inline C AvgFactor(int n) {
  return static_cast<C>(1) / static_cast<C>(n);
}
template <typename S>
CHORUS_HD inline S ScaleForAvgOne(S v, int n) {
  using Traits = StorageTraits<S>;
  using C = typename Traits::Compute;
  if constexpr (std::is_integral<C>::value) {
    return static_cast<S>(static_cast<long long>(v) / n);
  } else {
    return Traits::Store(Traits::Load(v) * AvgFactor<C>(n));
  }
}

}  // namespace CHORUS_KERNELS_ISA
}  // namespace kernels
}  // namespace chorus
