// fp16/bf16 conversions over every 16-bit pattern and at every rounding tie, against
// the independent reference in reference.h; the functors' wrap and NaN semantics.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "tests/kernels/reference.h"

namespace chorus {
namespace kernels {
namespace {

using testing::FloatBitsOf;
using testing::FloatOfBits;
using testing::kBFloat16Format;
using testing::kHalfFormat;
using testing::RefDecode;
using testing::RefEncode;

TEST(HalfConversion, DecodesEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefDecode(h, kHalfFormat);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint32_t bits = FloatBitsOf(f);
      ASSERT_NE(bits & 0x00400000u, 0u) << "NaN not made quiet: " << std::hex << h;
      ASSERT_EQ((bits >> 13) & 0x1FFu, h & 0x1FFu) << "NaN payload lost: " << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    }
  }
}

TEST(HalfConversion, RoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = FloatToHalf(HalfToFloat(static_cast<uint16_t>(h)));
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    ASSERT_EQ(back, nan ? (h | 0x200) : h) << std::hex << h;
  }
}

// Every midpoint between neighbouring halves (a tie), and the floats just beside it.
TEST(HalfConversion, RoundsTiesToEvenAndNeighboursToNearest) {
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double lo = RefDecode(h | sign, kHalfFormat);
      const double hi = h + 1 == 0x7C00 ? std::ldexp(sign ? -1.0 : 1.0, 16) : RefDecode((h + 1) | sign, kHalfFormat);
      const float mid = static_cast<float>((lo + hi) / 2);  // 12 significant bits: exact in float
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        ASSERT_EQ(FloatToHalf(f), RefEncode(f, kHalfFormat)) << "float bits " << std::hex << FloatBitsOf(f);
      }
    }
  }
}

TEST(HalfConversion, RoundsRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    if (i % 2 == 0) bits = (bits & 0x807FFFFFu) | ((100 + rng() % 60) << 23);  // around the half range
    const float f = FloatOfBits(bits);
    if (std::isnan(f)) {
      const uint16_t h = FloatToHalf(f);
      ASSERT_EQ(h & 0x7E00u, 0x7E00u);  // a quiet NaN
      ASSERT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u);
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), RefEncode(f, kHalfFormat)) << "float bits " << std::hex << bits;
  }
}

TEST(BFloat16Conversion, DecodesAndRoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    const double want = RefDecode(b, kBFloat16Format);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(FloatToBFloat16(f), b | 0x40) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
      ASSERT_EQ(FloatToBFloat16(f), b) << std::hex << b;
    }
  }
}

TEST(BFloat16Conversion, RoundsTiesNeighboursAndRandomFloats) {
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7F80) == 0x7F80) continue;      // inf/NaN have no midpoint above
    const uint32_t mid = (b << 16) | 0x8000u;  // exactly halfway to the next bf16
    for (uint32_t bits : {mid, mid - 1, mid + 1}) {
      ASSERT_EQ(FloatToBFloat16(FloatOfBits(bits)), RefEncode(FloatOfBits(bits), kBFloat16Format))
          << "float bits " << std::hex << bits;
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = rng();
    const float f = FloatOfBits(bits);
    if (std::isnan(f)) {
      ASSERT_EQ(FloatToBFloat16(f), ((bits >> 16) | 0x40)) << std::hex << bits;
    } else {
      ASSERT_EQ(FloatToBFloat16(f), RefEncode(f, kBFloat16Format)) << std::hex << bits;
    }
  }
}

TEST(Functors, IntegersWrap) {
  EXPECT_EQ(SumOp()(int8_t{127}, int8_t{1}), int8_t{-128});
  EXPECT_EQ(SumOp()(uint8_t{200}, uint8_t{100}), uint8_t{44});
  EXPECT_EQ(SumOp()(std::numeric_limits<int32_t>::max(), int32_t{1}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(SumOp()(std::numeric_limits<int64_t>::min(), int64_t{-1}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ProdOp()(int8_t{-128}, int8_t{-1}), int8_t{-128});
  EXPECT_EQ(ProdOp()(uint8_t{16}, uint8_t{16}), uint8_t{0});
  EXPECT_EQ(ProdOp()(int32_t{65536}, int32_t{65536}), int32_t{0});
  EXPECT_EQ(ProdOp()(std::numeric_limits<int64_t>::max(), int64_t{2}), int64_t{-2});
  EXPECT_EQ(MaxOp()(int8_t{-128}, int8_t{127}), int8_t{127});
  EXPECT_EQ(MinOp()(uint8_t{0}, uint8_t{255}), uint8_t{0});
}

TEST(Functors, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float other : {0.0f, -1.0f, inf, -inf}) {
    EXPECT_TRUE(std::isnan(MaxOp()(nan, other)));
    EXPECT_TRUE(std::isnan(MaxOp()(other, nan)));
    EXPECT_TRUE(std::isnan(MinOp()(nan, other)));
    EXPECT_TRUE(std::isnan(MinOp()(other, nan)));
  }
  EXPECT_TRUE(std::isnan(MaxOp()(1.0, std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(MaxOp()(2.0f, -inf), 2.0f);
  EXPECT_EQ(MinOp()(2.0f, -inf), -inf);
  // Equal inputs return b: the sign of zero follows the second operand, like MAXPS.
  EXPECT_TRUE(std::signbit(MaxOp()(0.0f, -0.0f)));
  EXPECT_FALSE(std::signbit(MaxOp()(-0.0f, 0.0f)));
}

TEST(Functors, AvgScaling) {
  EXPECT_EQ(ScaleForAvgOne<int32_t>(-7, 2), -3);  // truncates toward zero
  EXPECT_EQ(ScaleForAvgOne<int32_t>(7, 2), 3);
  EXPECT_EQ(ScaleForAvgOne<int8_t>(-128, 3), -42);
  EXPECT_EQ(ScaleForAvgOne<float>(3.0f, 4), 0.75f);
  EXPECT_EQ(ScaleForAvgOne<Half>(Half{0x4400}, 2).bits, 0x4000);  // 4 / 2 == 2
}

}  // namespace
}  // namespace kernels
}  // namespace chorus
