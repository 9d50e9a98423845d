#include "tests/algos/typed_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/elementwise.h"

namespace chorus::testing {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, int rank, uint64_t i) {
  return Mix(seed ^ Mix(static_cast<uint64_t>(rank) * 0x100000001b3ull ^ Mix(i)));
}

// One dtype as the reference sees it: its storage type, whether it is floating point,
// its unit roundoff, and the conversions to and from double.
struct F32 {
  using S = float;
  static constexpr bool kFloat = true;
  static constexpr double kUnit = 0x1p-24;
  static double Get(S v) { return v; }
  static S Put(double d) { return static_cast<float>(d); }
};
struct F64 {
  using S = double;
  static constexpr bool kFloat = true;
  static constexpr double kUnit = 0x1p-53;
  static double Get(S v) { return v; }
  static S Put(double d) { return d; }
};
struct F16 {
  using S = uint16_t;
  static constexpr bool kFloat = true;
  static constexpr double kUnit = 0x1p-11;
  static double Get(S v) { return kernels::HalfToFloat(v); }
  static S Put(double d) { return kernels::FloatToHalf(static_cast<float>(d)); }
};
struct BF16 {
  using S = uint16_t;
  static constexpr bool kFloat = true;
  static constexpr double kUnit = 0x1p-8;
  static double Get(S v) { return kernels::BFloat16ToFloat(v); }
  static S Put(double d) { return kernels::FloatToBFloat16(static_cast<float>(d)); }
};
template <typename T>
struct Int {
  using S = T;
  static constexpr bool kFloat = false;
};

template <typename F>
auto Visit(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: return f(F32{});
    case DataType::kFloat64: return f(F64{});
    case DataType::kFloat16: return f(F16{});
    case DataType::kBFloat16: return f(BF16{});
    case DataType::kInt8: return f(Int<int8_t>{});
    case DataType::kUint8: return f(Int<uint8_t>{});
    case DataType::kInt32: return f(Int<int32_t>{});
    case DataType::kInt64: return f(Int<int64_t>{});
  }
  return f(Int<uint8_t>{});
}

template <typename S>
S Load(const void* base, size_t i) {
  S v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(S), sizeof(S));
  return v;
}
template <typename S>
void Store(void* base, size_t i, S v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(S), &v, sizeof(S));
}

// The input value for hash h.
template <typename E>
typename E::S Input(ReduceOp op, uint64_t h) {
  using S = typename E::S;
  if constexpr (E::kFloat) {
    const double frac = static_cast<double>(h >> 44) / 1048576.0;  // [0, 1) in steps of 2^-20
    const double sign = (h & 1) != 0 ? -1.0 : 1.0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return E::Put(frac * 8 - 4);  // [-4, 4)
      // Never zero: MAX/MIN of +0 and -0 depends on operand order, which differs
      // between algorithms.
      case ReduceOp::kProd: return E::Put(sign * (0.5 + 1.5 * frac));  // |x| in [0.5, 2)
      case ReduceOp::kMax:
      case ReduceOp::kMin: return E::Put(sign * (0.5 + 99.5 * frac));  // |x| in [0.5, 100)
    }
    return E::Put(0);
  } else {
    using U = std::make_unsigned_t<S>;
    // Half the elements span the whole range (so sums and products wrap), the
    // rest are small (so products are not all 0 modulo 2^bits).
    if (op == ReduceOp::kMax || op == ReduceOp::kMin || (h & 2) != 0)
      return static_cast<S>(static_cast<U>((h >> 8) | (h << 56)));
    const int small = static_cast<int>((h >> 8) % 19);
    return static_cast<S>(std::is_signed<S>::value ? small - 9 : small);
  }
}

template <typename E>
void FillT(ReduceOp op, uint64_t seed, int rank, size_t first, size_t count, void* dst) {
  for (size_t i = 0; i < count; ++i) Store(dst, i, Input<E>(op, Hash(seed, rank, first + i)));
}

std::string Where(size_t first, size_t i) {
  return "element " + std::to_string(i) + " (input element " + std::to_string(first + i) + ")";
}

template <typename E>
Status CheckT(ReduceOp op, uint64_t seed, const std::vector<int>& ranks, size_t first, size_t count, const void* got) {
  using S = typename E::S;
  const size_t m = ranks.size();
  if (m == 0) return InvalidArgument("a reference reduction over no ranks");
  for (size_t i = 0; i < count; ++i) {
    const S g = Load<S>(got, i);
    if constexpr (E::kFloat) {
      double acc = 0, abs_sum = 0;
      for (size_t k = 0; k < m; ++k) {
        const double x = E::Get(Input<E>(op, Hash(seed, ranks[k], first + i)));
        abs_sum += std::fabs(x);
        if (k == 0) {
          acc = x;
        } else if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
          acc += x;
        } else if (op == ReduceOp::kProd) {
          acc *= x;
        } else if (op == ReduceOp::kMax) {
          acc = std::max(acc, x);
        } else {
          acc = std::min(acc, x);
        }
      }
      // Each of the m-1 reductions (and AVG's scaling) rounds once in the dtype,
      // by at most one unit roundoff of a partial result bounded by abs_sum.
      double tol = 0;
      if (op == ReduceOp::kSum) tol = (m + 1) * E::kUnit * abs_sum;
      if (op == ReduceOp::kProd) tol = 2 * (m + 1) * E::kUnit * std::fabs(acc);
      if (op == ReduceOp::kAvg) {
        acc /= static_cast<double>(m);
        tol = (m + 1) * E::kUnit * abs_sum / static_cast<double>(m) + 2 * E::kUnit * std::fabs(acc);
      }
      const double gv = E::Get(g);
      if (!(std::fabs(gv - acc) <= tol)) {  // NaN fails too
        return InternalError(Where(first, i) + " is " + std::to_string(gv) + ", want " + std::to_string(acc) + " +- " +
                             std::to_string(tol));
      }
    } else {
      using U = std::make_unsigned_t<S>;
      U acc = 0;
      S ext = 0;
      for (size_t k = 0; k < m; ++k) {
        const S x = Input<E>(op, Hash(seed, ranks[k], first + i));
        if (k == 0) {
          acc = static_cast<U>(x);
          ext = x;
          continue;
        }
        // Modular sum and product, in at least unsigned int (no signed overflow).
        using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
        if (op == ReduceOp::kProd) {
          acc = static_cast<U>(static_cast<W>(acc) * static_cast<W>(static_cast<U>(x)));
        } else {
          acc = static_cast<U>(static_cast<W>(acc) + static_cast<W>(static_cast<U>(x)));
        }
        ext = op == ReduceOp::kMax ? std::max(ext, x) : std::min(ext, x);
      }
      S want = static_cast<S>(acc);
      if (op == ReduceOp::kMax || op == ReduceOp::kMin) want = ext;
      // AVG: the wrapped sum divided by m, truncating toward zero.
      if (op == ReduceOp::kAvg) want = static_cast<S>(static_cast<long long>(want) / static_cast<long long>(m));
      if (g != want) {
        return InternalError(Where(first, i) + " is " + std::to_string(static_cast<long long>(g)) + ", want " +
                             std::to_string(static_cast<long long>(want)));
      }
    }
  }
  return Status::Ok();
}

// Byte p of rank's data is byte p % 8 of word p / 8.
unsigned char ByteAt(uint64_t word, size_t p) { return static_cast<unsigned char>(word >> (8 * (p % 8))); }

}  // namespace

uint64_t SeedOf(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc908ull;
  for (uint64_t p : parts) h = Mix(h ^ Mix(p));
  return h;
}

void TypedBuffer::Poison() { std::memset(bytes_.data(), 0xA5, bytes_.size()); }

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

void FillReductionInput(DataType t, ReduceOp op, uint64_t seed, int rank, size_t first, size_t count, void* dst) {
  Visit(t, [&](auto e) { FillT<decltype(e)>(op, seed, rank, first, count, dst); });
}

Status CheckReduction(DataType t, ReduceOp op, uint64_t seed, const std::vector<int>& ranks, size_t first, size_t count,
                      const void* got) {
  Status st = Visit(t, [&](auto e) { return CheckT<decltype(e)>(op, seed, ranks, first, count, got); });
  if (st.ok()) return st;
  return st.WithContext(std::string(ReduceOpName(op)) + " of " + DataTypeName(t) + " over " +
                        std::to_string(ranks.size()) + " ranks");
}

Status CheckReduction(DataType t, ReduceOp op, uint64_t seed, int n, size_t first, size_t count, const void* got) {
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  return CheckReduction(t, op, seed, ranks, first, count, got);
}

void FillBytes(uint64_t seed, int rank, size_t first_byte, size_t bytes, void* dst) {
  unsigned char* out = static_cast<unsigned char*>(dst);
  uint64_t word = Hash(seed, rank, first_byte / 8);
  for (size_t k = 0; k < bytes; ++k) {
    const size_t p = first_byte + k;
    if (p % 8 == 0) word = Hash(seed, rank, p / 8);
    out[k] = ByteAt(word, p);
  }
}

Status CheckBytes(uint64_t seed, int rank, size_t first_byte, size_t bytes, const void* got) {
  const unsigned char* in = static_cast<const unsigned char*>(got);
  uint64_t word = Hash(seed, rank, first_byte / 8);
  for (size_t k = 0; k < bytes; ++k) {
    const size_t p = first_byte + k;
    if (p % 8 == 0) word = Hash(seed, rank, p / 8);
    if (in[k] != ByteAt(word, p)) {
      return InternalError("byte " + std::to_string(k) + " is " + std::to_string(in[k]) + ", want " +
                           std::to_string(ByteAt(word, p)) + " (byte " + std::to_string(p) + " of rank " +
                           std::to_string(rank) + "'s data)");
    }
  }
  return Status::Ok();
}

Status CheckSameBytes(const void* a, const void* b, size_t bytes) {
  if (bytes == 0 || std::memcmp(a, b, bytes) == 0) return Status::Ok();
  const unsigned char* x = static_cast<const unsigned char*>(a);
  const unsigned char* y = static_cast<const unsigned char*>(b);
  size_t k = 0;
  while (x[k] == y[k]) ++k;
  return InternalError("results differ at byte " + std::to_string(k) + " of " + std::to_string(bytes) + ": " +
                       std::to_string(x[k]) + " vs " + std::to_string(y[k]));
}

}  // namespace chorus::testing
