// One 256-bit load's worth of each DataType, with the four ops on it. Include only
// from translation units compiled with -mavx2 -mf16c (the :avx2 library), and call
// only after the run-time CPU check.
//
// Each struct: Storage (element type in memory), V (register type; a pair of them for
// bf16), kLanes (elements per V), Load/Store (unaligned), Sum/Prod/Max/Min.
// Floating-point lanes also have Factor (the type AVG scales in) and Scale.
//
// Every op reproduces elementwise.h exactly: MAXPS(a, b) is `a > b ? a : b` (b when
// either is NaN), and a blend returns a NaN `a`; F16C converts like FloatToHalf; bf16
// rounds with the same integer arithmetic as FloatToBFloat16.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/elementwise.h"

namespace chorus {
namespace kernels {
inline namespace CHORUS_KERNELS_ISA {
namespace avx2 {

// Eight floats: the compute register of fp32, fp16 and bf16.
struct FloatOps {
  using V = __m256;
  using Factor = float;
  static V Sum(V a, V b) { return _mm256_add_ps(a, b); }
  static V Prod(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Max(V a, V b) { return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  static V Min(V a, V b) { return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  static V Scale(V a, float f) { return _mm256_mul_ps(a, _mm256_set1_ps(f)); }
};

struct F32Lanes : FloatOps {
  using Storage = float;
  static constexpr size_t kLanes = 8;
  static V Load(const char* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static void Store(char* p, V v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
};

struct F16Lanes : FloatOps {
  using Storage = Half;
  static constexpr size_t kLanes = 8;
  static V Load(const char* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void Store(char* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// bf16 is the top half of a float, so one 256-bit load of 16 values widens without
// any shuffle: the even-indexed values move up with a 16-bit left shift, the odd ones
// already sit in the top half of their 32-bit lane and only need the low half
// cleared. Storing is the inverse: round each lane so that its top half is the bf16
// result (to nearest even with integer adds, NaN made quiet: FloatToBFloat16's
// arithmetic), shift the even lanes down and merge with a 16-bit blend. An
// element-wise op does not care that the lanes are split even/odd as long as every
// operand is split the same way. (vpmovzxwd/vpackusdw widening costs 4 cross-lane
// shuffles per 8 values and made bf16 ALU-bound, slower than memory.)
struct BF16Lanes {
  using Storage = BFloat16;
  struct V {
    __m256 even, odd;
  };
  using Factor = float;
  static constexpr size_t kLanes = 16;
  static V Load(const char* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))))};
  }
  // Each lane's top 16 bits become FloatToBFloat16 of the lane.
  static __m256i RoundToTopHalf(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    const __m256i quiet_nan = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  static void Store(char* p, V v) {
    const __m256i even = _mm256_srli_epi32(RoundToTopHalf(v.even), 16);
    const __m256i both = _mm256_blend_epi16(even, RoundToTopHalf(v.odd), 0xAA);  // odd 16-bit words from `odd`
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), both);
  }
  static V Sum(V a, V b) { return {FloatOps::Sum(a.even, b.even), FloatOps::Sum(a.odd, b.odd)}; }
  static V Prod(V a, V b) { return {FloatOps::Prod(a.even, b.even), FloatOps::Prod(a.odd, b.odd)}; }
  static V Max(V a, V b) { return {FloatOps::Max(a.even, b.even), FloatOps::Max(a.odd, b.odd)}; }
  static V Min(V a, V b) { return {FloatOps::Min(a.even, b.even), FloatOps::Min(a.odd, b.odd)}; }
  static V Scale(V a, float f) { return {FloatOps::Scale(a.even, f), FloatOps::Scale(a.odd, f)}; }
};

struct F64Lanes {
  using Storage = double;
  using V = __m256d;
  using Factor = double;
  static constexpr size_t kLanes = 4;
  static V Load(const char* p) { return _mm256_loadu_pd(reinterpret_cast<const double*>(p)); }
  static void Store(char* p, V v) { _mm256_storeu_pd(reinterpret_cast<double*>(p), v); }
  static V Sum(V a, V b) { return _mm256_add_pd(a, b); }
  static V Prod(V a, V b) { return _mm256_mul_pd(a, b); }
  static V Max(V a, V b) { return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
  static V Min(V a, V b) { return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
  static V Scale(V a, double f) { return _mm256_mul_pd(a, _mm256_set1_pd(f)); }
};

struct IntLoadStore {
  using V = __m256i;
  static V Load(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void Store(char* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
};

// There is no 8-bit multiply: multiply the even and the odd bytes as 16-bit lanes and
// keep the low byte of each product (the low byte does not depend on signedness).
inline __m256i MulBytes(__m256i a, __m256i b) {
  const __m256i even = _mm256_mullo_epi16(a, b);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00FF)), _mm256_slli_epi16(odd, 8));
}

struct I8Lanes : IntLoadStore {
  using Storage = int8_t;
  static constexpr size_t kLanes = 32;
  static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  static V Prod(V a, V b) { return MulBytes(a, b); }
  static V Max(V a, V b) { return _mm256_max_epi8(a, b); }
  static V Min(V a, V b) { return _mm256_min_epi8(a, b); }
};

struct U8Lanes : IntLoadStore {
  using Storage = uint8_t;
  static constexpr size_t kLanes = 32;
  static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  static V Prod(V a, V b) { return MulBytes(a, b); }
  static V Max(V a, V b) { return _mm256_max_epu8(a, b); }
  static V Min(V a, V b) { return _mm256_min_epu8(a, b); }
};

struct I32Lanes : IntLoadStore {
  using Storage = int32_t;
  static constexpr size_t kLanes = 8;
  static V Sum(V a, V b) { return _mm256_add_epi32(a, b); }
  static V Prod(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V Max(V a, V b) { return _mm256_max_epi32(a, b); }
  static V Min(V a, V b) { return _mm256_min_epi32(a, b); }
};

struct I64Lanes : IntLoadStore {
  using Storage = int64_t;
  static constexpr size_t kLanes = 4;
  static V Sum(V a, V b) { return _mm256_add_epi64(a, b); }
  // No 64-bit multiply before AVX-512: lo*lo + ((lo*hi + hi*lo) << 32), mod 2^64.
  static V Prod(V a, V b) {
    const __m256i lo_lo = _mm256_mul_epu32(a, b);
    const __m256i hi_lo = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
    const __m256i lo_hi = _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32));
    return _mm256_add_epi64(lo_lo, _mm256_slli_epi64(_mm256_add_epi64(hi_lo, lo_hi), 32));
  }
  static V Max(V a, V b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
  static V Min(V a, V b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(b, a)); }
};

// The functor types of elementwise.h mapped to the lane ops.
template <typename Op>
struct LaneOp;
template <>
struct LaneOp<SumOp> {
  template <typename L>
  static typename L::V Apply(typename L::V a, typename L::V b) {
    return L::Sum(a, b);
  }
};
template <>
struct LaneOp<ProdOp> {
  template <typename L>
  static typename L::V Apply(typename L::V a, typename L::V b) {
    return L::Prod(a, b);
  }
};
template <>
struct LaneOp<MaxOp> {
  template <typename L>
  static typename L::V Apply(typename L::V a, typename L::V b) {
    return L::Max(a, b);
  }
};
template <>
struct LaneOp<MinOp> {
  template <typename L>
  static typename L::V Apply(typename L::V a, typename L::V b) {
    return L::Min(a, b);
  }
};

// Storage type -> lanes.
template <typename S>
struct LanesFor;
template <>
struct LanesFor<float> {
  using type = F32Lanes;
};
template <>
struct LanesFor<double> {
  using type = F64Lanes;
};
template <>
struct LanesFor<Half> {
  using type = F16Lanes;
};
template <>
struct LanesFor<BFloat16> {
  using type = BF16Lanes;
};
template <>
struct LanesFor<int8_t> {
  using type = I8Lanes;
};
template <>
struct LanesFor<uint8_t> {
  using type = U8Lanes;
};
template <>
struct LanesFor<int32_t> {
  using type = I32Lanes;
};
template <>
struct LanesFor<int64_t> {
  using type = I64Lanes;
};

}  // namespace avx2
}  // namespace CHORUS_KERNELS_ISA
}  // namespace kernels
}  // namespace chorus
