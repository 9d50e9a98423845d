// The AVX2 path against the portable path on arbitrary bit patterns (NaNs with any
// payload, infinities, subnormals): the results must be bit-identical. The only
// freedom allowed is which NaN payload a SUM/PROD of two NaNs yields (x86 returns the
// first operand's, and the compiler may swap the operands of a commutative scalar
// op); both paths must still agree that the result is NaN. Skipped without AVX2.
#include <immintrin.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "kernels/reduce_internal.h"
#include "tests/kernels/test_util.h"

namespace chorus {
namespace kernels {
namespace testing {
namespace {

bool BothNaN(DataType t, uint64_t x, uint64_t y) {
  return IsFloatType(t) && std::isnan(DecodeFloat(t, x)) && std::isnan(DecodeFloat(t, y));
}

class IsaParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!internal::Avx2Supported()) GTEST_SKIP() << "this CPU has no AVX2/F16C/FMA: only the scalar path exists";
  }
  void TearDown() override { internal::SetForceScalarForTesting(false); }

  // Runs `call` on the scalar path into `scalar_out` and on AVX2 into `avx2_out`.
  template <typename Call>
  void RunBoth(Call call, std::vector<uint8_t>& scalar_out, std::vector<uint8_t>& avx2_out) {
    internal::SetForceScalarForTesting(true);
    call(scalar_out.data());
    internal::SetForceScalarForTesting(false);
    ASSERT_TRUE(internal::UseAvx2());
    call(avx2_out.data());
  }
};

void FillRaw(std::vector<uint8_t>& buf, std::mt19937_64& rng) {
  for (auto& byte : buf) byte = static_cast<uint8_t>(rng());
}

TEST_F(IsaParityTest, BinaryOnRandomBitPatterns) {
  std::mt19937_64 rng(5);
  for (DataType t : kAllDataTypes) {
    const size_t size = DataTypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{31}, size_t{33}, size_t{1023}, size_t{4099}, size_t{70000}}) {
        for (size_t off : {size_t{0}, size_t{1}, size_t{6}}) {
          std::vector<uint8_t> a(count * size + 8), b(count * size + 8);
          FillRaw(a, rng);
          FillRaw(b, rng);
          std::vector<uint8_t> s(count * size + 8, 0xA5), v(count * size + 8, 0xA5);
          RunBoth(
              [&](uint8_t* out) {
                ASSERT_TRUE(Reduce(t, op, out + off, a.data() + (off + 1) % 8, b.data() + off, count).ok());
              },
              s, v);
          for (size_t i = 0; i < count; ++i) {
            const uint64_t x = LoadBits(t, a.data() + (off + 1) % 8, i), y = LoadBits(t, b.data() + off, i);
            const uint64_t rs = LoadBits(t, s.data() + off, i), rv = LoadBits(t, v.data() + off, i);
            if (rs == rv) continue;
            const bool both_nan_inputs =
                BothNaN(t, x, y) && (op == ReduceOp::kSum || op == ReduceOp::kProd || op == ReduceOp::kAvg);
            ASSERT_TRUE(both_nan_inputs && BothNaN(t, rs, rv))
                << DataTypeName(t) << " " << ReduceOpName(op) << " count " << count << " element " << i << std::hex
                << ": inputs 0x" << x << ", 0x" << y << " scalar 0x" << rs << " avx2 0x" << rv;
          }
          ASSERT_EQ(0, memcmp(s.data() + off + count * size, v.data() + off + count * size, 8 - off));
        }
      }
    }
  }
}

TEST_F(IsaParityTest, ReduceNAndScaleOnRandomBitPatterns) {
  std::mt19937_64 rng(6);
  for (DataType t : kAllDataTypes) {
    const size_t size = DataTypeSize(t);
    const size_t count = 2051;
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kSum}) {
      for (int n = 2; n <= 8; ++n) {
        std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * size + 3));
        std::vector<const void*> ptrs;
        for (int k = 0; k < n; ++k) {
          // Sums and products of many random patterns are nearly all NaN or inf; use
          // moderate values there and raw bits for MAX/MIN.
          if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
            FillRaw(in[k], rng);
          } else {
            for (size_t i = 0; i < count; ++i) StoreBits(t, in[k].data() + k % 4, i, RandomElement(t, rng));
          }
          ptrs.push_back(in[k].data() + k % 4);
        }
        std::vector<uint8_t> s(count * size), v(count * size);
        RunBoth([&](uint8_t* out) { ASSERT_TRUE(ReduceN(t, op, out, ptrs.data(), n, count).ok()); }, s, v);
        for (size_t i = 0; i < count; ++i) {
          const uint64_t rs = LoadBits(t, s.data(), i), rv = LoadBits(t, v.data(), i);
          const bool nan_payload_freedom = (op == ReduceOp::kSum || op == ReduceOp::kProd) && BothNaN(t, rs, rv);
          ASSERT_TRUE(rs == rv || nan_payload_freedom)
              << DataTypeName(t) << " " << ReduceOpName(op) << " n " << n << " element " << i << std::hex
              << ": scalar 0x" << rs << " avx2 0x" << rv;
        }
      }
    }
    for (int n : {2, 3, 7}) {
      std::vector<uint8_t> orig(count * size);
      FillRaw(orig, rng);
      std::vector<uint8_t> s = orig, v = orig;
      internal::SetForceScalarForTesting(true);
      ASSERT_TRUE(ScaleForAvg(t, s.data(), count, n).ok());
      internal::SetForceScalarForTesting(false);
      ASSERT_TRUE(ScaleForAvg(t, v.data(), count, n).ok());
      ASSERT_EQ(s, v) << DataTypeName(t) << " ScaleForAvg n " << n;
    }
  }
}

// Every fp16 pattern through F16C (x * 1 in float, then back) and through the scalar
// conversions: identical bits, NaNs included.
TEST_F(IsaParityTest, SixteenBitFloatsEveryPatternTimesOne) {
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const uint16_t one_bits = t == DataType::kFloat16 ? 0x3C00 : 0x3F80;
    std::vector<uint8_t> a(2 * 65536), one(2 * 65536), s(2 * 65536), v(2 * 65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      StoreBits(t, a.data(), h, h);
      StoreBits(t, one.data(), h, one_bits);
    }
    RunBoth([&](uint8_t* out) { ASSERT_TRUE(Reduce(t, ReduceOp::kProd, out, a.data(), one.data(), 65536).ok()); }, s,
            v);
    for (uint32_t h = 0; h < 65536; ++h) {
      ASSERT_EQ(LoadBits(t, s.data(), h), LoadBits(t, v.data(), h)) << DataTypeName(t) << " " << std::hex << h;
    }
  }
}

// F16C's float->half on a sweep of float patterns (every top-16-bit combination with
// random low bits) against FloatToHalf.
__attribute__((target("avx2,f16c"))) void F16cConvert(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
}
__attribute__((target("avx2,f16c"))) void F16cWiden(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
}

TEST_F(IsaParityTest, ScalarConversionsMatchF16c) {
  std::vector<uint16_t> halves(65536);
  std::vector<float> widened(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  F16cWiden(halves.data(), widened.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(FloatBitsOf(HalfToFloat(static_cast<uint16_t>(h))), FloatBitsOf(widened[h])) << std::hex << h;
  }
  std::mt19937 rng(9);
  std::vector<float> floats(65536 * 16);
  std::vector<uint16_t> narrowed(floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    floats[i] = FloatOfBits(static_cast<uint32_t>(i / 16) << 16 | (i % 16 == 0 ? 0 : rng() & 0xFFFF));
  }
  F16cConvert(floats.data(), narrowed.data(), floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(FloatToHalf(floats[i]), narrowed[i]) << "float bits " << std::hex << FloatBitsOf(floats[i]);
  }
}

}  // namespace
}  // namespace testing
}  // namespace kernels
}  // namespace chorus
