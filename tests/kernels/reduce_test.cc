// The public kernels against the reference: every dtype x op, odd lengths, unaligned
// buffers with poisoned guards, special values, wrap-around, aliasing, ReduceN and
// ScaleForAvg. Each test runs on the path this CPU picks and on the forced scalar path.
#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/reduce_internal.h"
#include "tests/kernels/test_util.h"

namespace chorus {
namespace kernels {
namespace testing {
namespace {

std::string Label(DataType t, ReduceOp op, size_t count) {
  return std::string(DataTypeName(t)) + " " + ReduceOpName(op) + " count " + std::to_string(count);
}

void Fill(GuardedBuffer& buf, DataType t, size_t count, std::mt19937_64& rng) {
  for (size_t i = 0; i < count; ++i) StoreBits(t, buf.data(), i, RandomElement(t, rng));
}

// Whether `p` still holds `copy` (std::equal, since memcmp must not be handed the null
// data() of an empty vector, even for 0 bytes).
bool Unchanged(const std::vector<uint8_t>& copy, const uint8_t* p) { return std::equal(copy.begin(), copy.end(), p); }

class ReduceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { internal::SetForceScalarForTesting(GetParam()); }
  void TearDown() override { internal::SetForceScalarForTesting(false); }
};

TEST_P(ReduceTest, EveryTypeOpLengthAndAlignment) {
  std::mt19937_64 rng(1);
  for (DataType t : kAllDataTypes) {
    const size_t size = DataTypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : kOddLengths) {
        for (size_t off = 0; off < 8; ++off) {
          GuardedBuffer a(count * size, (off + 3) % 8), b(count * size, (off + 5) % 8), dst(count * size, off);
          Fill(a, t, count, rng);
          Fill(b, t, count, rng);
          const std::vector<uint8_t> a_copy(a.data(), a.data() + a.bytes());
          const std::vector<uint8_t> b_copy(b.data(), b.data() + b.bytes());
          ASSERT_TRUE(Reduce(t, op, dst.data(), a.data(), b.data(), count).ok());
          const std::string label = Label(t, op, count) + " offset " + std::to_string(off);
          ASSERT_TRUE(dst.GuardsIntact()) << "write outside [0, count): " << label;
          ASSERT_TRUE(Unchanged(a_copy, a.data())) << "input a modified: " << label;
          ASSERT_TRUE(Unchanged(b_copy, b.data())) << "input b modified: " << label;
          for (size_t i = 0; i < count; ++i) {
            const uint64_t x = LoadBits(t, a.data(), i), y = LoadBits(t, b.data(), i);
            const std::string bad = Mismatch(t, LoadBits(t, dst.data(), i), RefBinary(t, op, x, y));
            ASSERT_EQ(bad, "") << label << " element " << i << " inputs 0x" << std::hex << x << ", 0x" << y;
          }
        }
      }
    }
  }
}

// All pairs of special values: NaN, infinities, signed zeros, subnormals, extremes.
TEST_P(ReduceTest, SpecialFloatValues) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    const int bits = BitWidth(t);
    const uint64_t sign = uint64_t{1} << (bits - 1);
    const uint64_t inf = EncodeFloat(t, std::numeric_limits<double>::infinity());
    const uint64_t min_normal = t == DataType::kFloat64   ? uint64_t{1} << 52
                                : t == DataType::kFloat32 ? uint64_t{1} << 23
                                : t == DataType::kFloat16 ? uint64_t{1} << 10
                                                          : uint64_t{1} << 7;
    const std::vector<uint64_t> specials = {QuietNaNBits(t),
                                            QuietNaNBits(t) | sign,
                                            inf,
                                            inf | sign,
                                            0,
                                            sign,
                                            1,
                                            1 | sign,
                                            min_normal - 1,
                                            min_normal,
                                            inf - 1,
                                            (inf - 1) | sign,
                                            EncodeFloat(t, 1.0),
                                            EncodeFloat(t, -1.5)};
    const size_t count = specials.size() * specials.size();
    for (ReduceOp op : kAllOps) {
      GuardedBuffer a(count * DataTypeSize(t), 1), b(count * DataTypeSize(t), 2), dst(count * DataTypeSize(t), 3);
      for (size_t i = 0; i < specials.size(); ++i) {
        for (size_t j = 0; j < specials.size(); ++j) {
          StoreBits(t, a.data(), i * specials.size() + j, specials[i]);
          StoreBits(t, b.data(), i * specials.size() + j, specials[j]);
        }
      }
      ASSERT_TRUE(Reduce(t, op, dst.data(), a.data(), b.data(), count).ok());
      ASSERT_TRUE(dst.GuardsIntact());
      for (size_t i = 0; i < count; ++i) {
        const uint64_t x = LoadBits(t, a.data(), i), y = LoadBits(t, b.data(), i);
        ASSERT_EQ(Mismatch(t, LoadBits(t, dst.data(), i), RefBinary(t, op, x, y)), "")
            << Label(t, op, count) << " inputs 0x" << std::hex << x << ", 0x" << y;
      }
    }
  }
}

TEST_P(ReduceTest, IntegerOverflowWraps) {
  std::vector<int8_t> a8(37, 127), b8(37, 1), d8(37);
  ASSERT_TRUE(Reduce(DataType::kInt8, ReduceOp::kSum, d8.data(), a8.data(), b8.data(), 37).ok());
  for (int8_t v : d8) ASSERT_EQ(v, -128);
  std::vector<int8_t> m8(37, -128), n8(37, -1);
  ASSERT_TRUE(Reduce(DataType::kInt8, ReduceOp::kProd, d8.data(), m8.data(), n8.data(), 37).ok());
  for (int8_t v : d8) ASSERT_EQ(v, -128);
  std::vector<uint8_t> au(40, 200), bu(40, 100), du(40);
  ASSERT_TRUE(Reduce(DataType::kUint8, ReduceOp::kSum, du.data(), au.data(), bu.data(), 40).ok());
  for (uint8_t v : du) ASSERT_EQ(v, 44);
  std::vector<int32_t> a32(9, std::numeric_limits<int32_t>::max()), b32(9, 1), d32(9);
  ASSERT_TRUE(Reduce(DataType::kInt32, ReduceOp::kSum, d32.data(), a32.data(), b32.data(), 9).ok());
  for (int32_t v : d32) ASSERT_EQ(v, std::numeric_limits<int32_t>::min());
  std::vector<int64_t> a64(5, std::numeric_limits<int64_t>::max()), b64(5, 3), d64(5);
  ASSERT_TRUE(Reduce(DataType::kInt64, ReduceOp::kProd, d64.data(), a64.data(), b64.data(), 5).ok());
  for (int64_t v : d64) ASSERT_EQ(v, std::numeric_limits<int64_t>::max() - 2);  // 3 * (2^63 - 1) mod 2^64
}

TEST_P(ReduceTest, InPlaceAliasing) {
  std::mt19937_64 rng(2);
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllOps) {
      for (size_t count : {size_t{1}, size_t{33}, size_t{4099}}) {
        const size_t bytes = count * DataTypeSize(t);
        GuardedBuffer a(bytes, 3), b(bytes, 6);
        Fill(a, t, count, rng);
        Fill(b, t, count, rng);
        const std::vector<uint8_t> a0(a.data(), a.data() + bytes), b0(b.data(), b.data() + bytes);
        auto check = [&](const uint8_t* out, const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
                         const char* how) {
          for (size_t i = 0; i < count; ++i) {
            const Expected want = RefBinary(t, op, LoadBits(t, x.data(), i), LoadBits(t, y.data(), i));
            ASSERT_EQ(Mismatch(t, LoadBits(t, out, i), want), "") << how << " " << Label(t, op, count) << " i " << i;
          }
        };
        ASSERT_TRUE(Reduce(t, op, a.data(), a.data(), b.data(), count).ok());  // dst == a
        check(a.data(), a0, b0, "dst==a");
        memcpy(a.data(), a0.data(), bytes);
        ASSERT_TRUE(Reduce(t, op, b.data(), a.data(), b.data(), count).ok());  // dst == b
        check(b.data(), a0, b0, "dst==b");
        memcpy(b.data(), b0.data(), bytes);
        ASSERT_TRUE(ReduceInPlace(t, op, a.data(), b.data(), count).ok());
        check(a.data(), a0, b0, "ReduceInPlace");
        memcpy(a.data(), a0.data(), bytes);
        ASSERT_TRUE(Reduce(t, op, a.data(), a.data(), a.data(), count).ok());  // all three
        check(a.data(), a0, a0, "dst==a==b");
        ASSERT_TRUE(a.GuardsIntact() && b.GuardsIntact());
      }
    }
  }
}

TEST_P(ReduceTest, ReduceNOneToEightInputs) {
  std::mt19937_64 rng(3);
  for (DataType t : kAllDataTypes) {
    const size_t size = DataTypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (int n = 1; n <= 8; ++n) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{33}, size_t{4099}}) {
          // alias 0: separate dst; 1: dst == inputs[0]; 2: dst == inputs[n-1].
          for (int alias = 0; alias < 3; ++alias) {
            std::vector<GuardedBuffer> in;
            in.reserve(n);
            for (int k = 0; k < n; ++k) in.emplace_back(count * size, (k * 3 + alias) % 8);
            std::vector<std::vector<uint8_t>> copies;
            std::vector<const void*> ptrs;
            for (auto& buf : in) {
              Fill(buf, t, count, rng);
              copies.emplace_back(buf.data(), buf.data() + buf.bytes());
              ptrs.push_back(buf.data());
            }
            GuardedBuffer own(count * size, 5);
            GuardedBuffer& dst = alias == 0 ? own : alias == 1 ? in[0] : in[n - 1];
            ASSERT_TRUE(ReduceN(t, op, dst.data(), ptrs.data(), n, count).ok());
            ASSERT_TRUE(dst.GuardsIntact());
            const std::string label =
                Label(t, op, count) + " n " + std::to_string(n) + " alias " + std::to_string(alias);
            std::vector<uint64_t> xs(n);
            for (size_t i = 0; i < count; ++i) {
              for (int k = 0; k < n; ++k) xs[k] = LoadBits(t, copies[k].data(), i);
              // n == 1 is a plain copy: the bits come back unchanged (even a NaN's).
              const Expected want = n == 1 ? Expected{xs[0], false} : RefNAry(t, op, xs);
              ASSERT_EQ(Mismatch(t, LoadBits(t, dst.data(), i), want), "") << label << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(ReduceTest, ScaleForAvg) {
  std::mt19937_64 rng(4);
  for (DataType t : kAllDataTypes) {
    for (int n : {1, 2, 3, 5, 8, 1000}) {
      for (size_t count : {size_t{0}, size_t{7}, size_t{33}, size_t{4099}}) {
        GuardedBuffer buf(count * DataTypeSize(t), 7);
        Fill(buf, t, count, rng);
        const std::vector<uint8_t> orig(buf.data(), buf.data() + buf.bytes());
        ASSERT_TRUE(ScaleForAvg(t, buf.data(), count, n).ok());
        ASSERT_TRUE(buf.GuardsIntact());
        for (size_t i = 0; i < count; ++i) {
          const uint64_t x = LoadBits(t, orig.data(), i);
          const Expected want = n == 1 ? Expected{x, false} : RefScale(t, x, n);
          ASSERT_EQ(Mismatch(t, LoadBits(t, buf.data(), i), want), "")
              << DataTypeName(t) << " n " << n << " element " << i << " input 0x" << std::hex << x;
        }
      }
    }
  }
  std::vector<int32_t> v = {-7, 7, -1, 1, std::numeric_limits<int32_t>::min()};
  ASSERT_TRUE(ScaleForAvg(DataType::kInt32, v.data(), v.size(), 2).ok());
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, 0, 0, std::numeric_limits<int32_t>::min() / 2}));
}

// AVG reduces as SUM; the division is ScaleForAvg's, applied once at the end.
TEST_P(ReduceTest, AvgIsSumThenScale) {
  std::vector<float> a = {1, 2, 3}, b = {3, 4, 6}, c = {2, 0, 3}, out(3);
  const void* in[] = {a.data(), b.data(), c.data()};
  ASSERT_TRUE(ReduceN(DataType::kFloat32, ReduceOp::kAvg, out.data(), in, 3, 3).ok());
  EXPECT_EQ(out, (std::vector<float>{6, 6, 12}));
  ASSERT_TRUE(ScaleForAvg(DataType::kFloat32, out.data(), 3, 3).ok());
  EXPECT_EQ(out, (std::vector<float>{6 * (1.0f / 3), 2, 12 * (1.0f / 3)}));
  EXPECT_EQ(ElementwiseOp(ReduceOp::kAvg), ReduceOp::kSum);
  EXPECT_EQ(ElementwiseOp(ReduceOp::kMax), ReduceOp::kMax);
}

INSTANTIATE_TEST_SUITE_P(Paths, ReduceTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ForcedScalar" : "Auto";
                         });

TEST(ReduceArgs, InvalidEnumsAreNamed) {
  float x[4] = {}, y[4] = {}, z[4] = {};
  Status st = Reduce(static_cast<DataType>(99), ReduceOp::kSum, z, x, y, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("DataType value 99"), std::string::npos) << st.message();
  st = Reduce(DataType::kFloat32, static_cast<ReduceOp>(42), z, x, y, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ReduceOp value 42"), std::string::npos) << st.message();
  const void* in[] = {x, y};
  st = ReduceN(static_cast<DataType>(8), ReduceOp::kSum, z, in, 2, 4);
  EXPECT_NE(st.message().find("ReduceN: invalid DataType value 8"), std::string::npos) << st.message();
  st = ScaleForAvg(static_cast<DataType>(200), z, 4, 2);
  EXPECT_NE(st.message().find("ScaleForAvg: invalid DataType value 200"), std::string::npos) << st.message();
  st = ReduceInPlace(DataType::kInt8, static_cast<ReduceOp>(5), z, x, 4);
  EXPECT_NE(st.message().find("ReduceInPlace: invalid ReduceOp value 5"), std::string::npos) << st.message();
}

TEST(ReduceArgs, NullBuffersAndBadCountsAreNamed) {
  float x[4] = {}, y[4] = {};
  Status st = Reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, x, y, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dst is null"), std::string::npos) << st.message();
  st = Reduce(DataType::kFloat32, ReduceOp::kSum, x, x, nullptr, 4);
  EXPECT_NE(st.message().find("b is null"), std::string::npos) << st.message();
  EXPECT_TRUE(Reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0).ok());  // nothing to do

  const void* in[] = {x, y, x, nullptr};
  st = ReduceN(DataType::kFloat32, ReduceOp::kSum, x, in, 4, 4);
  EXPECT_NE(st.message().find("inputs[3] is null"), std::string::npos) << st.message();
  st = ReduceN(DataType::kFloat32, ReduceOp::kSum, x, in, 0, 4);
  EXPECT_NE(st.message().find("n must be >= 1, got 0"), std::string::npos) << st.message();
  st = ReduceN(DataType::kFloat32, ReduceOp::kSum, x, nullptr, 2, 4);
  EXPECT_NE(st.message().find("inputs array is null"), std::string::npos) << st.message();

  st = ScaleForAvg(DataType::kFloat32, x, 4, 0);
  EXPECT_NE(st.message().find("must be >= 1, got 0"), std::string::npos) << st.message();
  st = ScaleForAvg(DataType::kInt64, x, SIZE_MAX / 4, 2);
  EXPECT_NE(st.message().find("overflows"), std::string::npos) << st.message();
}

TEST(ReduceIsa, ReportsThePath) {
  const std::string isa = ActiveReduceIsa();
  EXPECT_EQ(isa, internal::Avx2Supported() ? "avx2" : "scalar");
  internal::SetForceScalarForTesting(true);
  EXPECT_STREQ(ActiveReduceIsa(), "scalar");
  internal::SetForceScalarForTesting(false);
}

}  // namespace
}  // namespace testing
}  // namespace kernels
}  // namespace chorus
