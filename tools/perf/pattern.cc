#include "tools/perf/pattern.h"

#include <cmath>
#include <cstring>

namespace chorus {
namespace perf {
namespace {

bool Reduces(Collective c) { return HasReduceOp(c); }

double Combine(ReduceOp op, double acc, double v) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return acc + v;
    case ReduceOp::kProd: return acc * v;
    case ReduceOp::kMax: return v > acc ? v : acc;
    case ReduceOp::kMin: return v < acc ? v : acc;
  }
  return acc;
}

double ReduceAcross(Collective coll, ReduceOp op, int nranks, size_t index) {
  double acc = InputValue(coll, op, 0, index);
  for (int r = 1; r < nranks; ++r) acc = Combine(op, acc, InputValue(coll, op, r, index));
  if (op == ReduceOp::kAvg) acc /= nranks;
  return acc;
}

// Typed loops keep filling and checking 256 MiB buffers fast.
template <typename T>
struct Plain {
  static double Load(const void* b, size_t i) { return static_cast<double>(static_cast<const T*>(b)[i]); }
  static void Store(void* b, size_t i, double v) { static_cast<T*>(b)[i] = static_cast<T>(v); }
};
struct Half {
  static double Load(const void* b, size_t i) { return HalfToFloat(static_cast<const uint16_t*>(b)[i]); }
  static void Store(void* b, size_t i, double v) { static_cast<uint16_t*>(b)[i] = FloatToHalf(static_cast<float>(v)); }
};
struct BHalf {
  static double Load(const void* b, size_t i) { return BFloat16ToFloat(static_cast<const uint16_t*>(b)[i]); }
  static void Store(void* b, size_t i, double v) {
    static_cast<uint16_t*>(b)[i] = FloatToBFloat16(static_cast<float>(v));
  }
};

template <typename Fn>
auto WithAccess(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: return fn(Plain<float>());
    case DataType::kFloat64: return fn(Plain<double>());
    case DataType::kFloat16: return fn(Half());
    case DataType::kBFloat16: return fn(BHalf());
    case DataType::kInt8: return fn(Plain<int8_t>());
    case DataType::kUint8: return fn(Plain<uint8_t>());
    case DataType::kInt32: return fn(Plain<int32_t>());
    case DataType::kInt64: return fn(Plain<int64_t>());
  }
  return fn(Plain<float>());
}

bool Matches(DataType dtype, ReduceOp op, double got, double want) {
  if (op != ReduceOp::kAvg) return got == want;
  // avg is sum/n, generally not exact: allow the dtype's rounding.
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt32:
    case DataType::kInt64: return std::fabs(got - std::trunc(want)) <= 1.0;
    case DataType::kFloat16:
    case DataType::kBFloat16: return std::fabs(got - want) <= 1e-2 * std::fabs(want) + 1e-3;
    default: return std::fabs(got - want) <= 1e-6 * std::fabs(want);
  }
}

}  // namespace

double InputValue(Collective coll, ReduceOp op, int rank, size_t index) {
  if (Reduces(coll) && op == ReduceOp::kProd) return 1.0 + static_cast<double>((index + rank) % 2);
  return 1.0 + static_cast<double>((index + 3 * static_cast<size_t>(rank)) % 7);
}

bool ExpectedValue(Collective coll, ReduceOp op, int rank, int nranks, int root, size_t count, size_t index,
                   double* value) {
  switch (coll) {
    case Collective::kAllReduce: *value = ReduceAcross(coll, op, nranks, index); return true;
    case Collective::kReduce:
      if (rank != root) return false;
      *value = ReduceAcross(coll, op, nranks, index);
      return true;
    case Collective::kReduceScatter:
      *value = ReduceAcross(coll, op, nranks, static_cast<size_t>(rank) * count + index);
      return true;
    case Collective::kBroadcast: *value = InputValue(coll, op, root, index); return true;
    case Collective::kSendRecv: *value = InputValue(coll, op, (rank - 1 + nranks) % nranks, index); return true;
    case Collective::kGather:
      if (rank != root) return false;
      [[fallthrough]];
    case Collective::kAllGather:
      *value = InputValue(coll, op, static_cast<int>(index / count), index % count);
      return true;
    case Collective::kAllToAll:
      *value = InputValue(coll, op, static_cast<int>(index / count), static_cast<size_t>(rank) * count + index % count);
      return true;
    case Collective::kScatter:
      *value = InputValue(coll, op, root, static_cast<size_t>(rank) * count + index);
      return true;
    case Collective::kBarrier: return false;
  }
  return false;
}

void FillInput(Collective coll, DataType dtype, ReduceOp op, int rank, size_t send_count, void* send) {
  WithAccess(dtype, [&](auto access) {
    for (size_t i = 0; i < send_count; ++i) access.Store(send, i, InputValue(coll, op, rank, i));
    return 0;
  });
}

void ClearBuffer(DataType dtype, size_t n, void* buf) {
  std::memset(buf, 0, n * DataTypeSize(dtype));  // 0 is +0 in every dtype here
}

int64_t CountWrong(Collective coll, DataType dtype, ReduceOp op, int rank, int nranks, int root, const CollShape& shape,
                   const void* recv) {
  return WithAccess(dtype, [&](auto access) {
    int64_t wrong = 0;
    double want = 0;
    for (size_t i = 0; i < shape.recv_count; ++i) {
      if (!ExpectedValue(coll, op, rank, nranks, root, shape.param_count, i, &want)) continue;
      if (!Matches(dtype, op, access.Load(recv, i), want)) ++wrong;
    }
    return wrong;
  });
}

double LoadElement(DataType dtype, const void* buf, size_t i) {
  return WithAccess(dtype, [&](auto access) { return access.Load(buf, i); });
}

void StoreElement(DataType dtype, void* buf, size_t i, double v) {
  WithAccess(dtype, [&](auto access) {
    access.Store(buf, i, v);
    return 0;
  });
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to inf
  if (abs < 0x38800000u) {                                               // subnormal half (or zero)
    // Scale into the subnormal range with float arithmetic, which rounds to nearest even.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // 2^24: one unit of the smallest subnormal
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t mant = abs & 0x7fffffu;
  uint32_t h = ((abs >> 23) - 112u) << 10 | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -out : out;
  }
  const uint32_t bits = sign | (exp == 31 ? (0xffu << 23) | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);                                                       // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

}  // namespace perf
}  // namespace chorus
