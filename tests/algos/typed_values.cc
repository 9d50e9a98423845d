#include "tests/algos/typed_values.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/elementwise.h"

namespace chorus::testing {
namespace {

template <typename T>
T LoadAs(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void StoreAs(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}
bool IsUnsigned(DataType t) { return t == DataType::kUint8; }

double TypedBuffer::Get(size_t i) const {
  const unsigned char* p = bytes_.data() + i * DataTypeSize(dtype_);
  switch (dtype_) {
    case DataType::kFloat32:
      return LoadAs<float>(p);
    case DataType::kFloat64:
      return LoadAs<double>(p);
    case DataType::kFloat16:
      return kernels::HalfToFloat(LoadAs<uint16_t>(p));
    case DataType::kBFloat16:
      return kernels::BFloat16ToFloat(LoadAs<uint16_t>(p));
    case DataType::kInt8:
      return LoadAs<int8_t>(p);
    case DataType::kUint8:
      return LoadAs<uint8_t>(p);
    case DataType::kInt32:
      return LoadAs<int32_t>(p);
    case DataType::kInt64:
      return static_cast<double>(LoadAs<int64_t>(p));
  }
  return NAN;
}

void TypedBuffer::Set(size_t i, double v) {
  unsigned char* p = bytes_.data() + i * DataTypeSize(dtype_);
  switch (dtype_) {
    case DataType::kFloat32:
      return StoreAs<float>(p, static_cast<float>(v));
    case DataType::kFloat64:
      return StoreAs<double>(p, v);
    case DataType::kFloat16:
      return StoreAs<uint16_t>(p, kernels::FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return StoreAs<uint16_t>(p, kernels::FloatToBFloat16(static_cast<float>(v)));
    case DataType::kInt8:
      return StoreAs<int8_t>(p, static_cast<int8_t>(v));
    case DataType::kUint8:
      return StoreAs<uint8_t>(p, static_cast<uint8_t>(v));
    case DataType::kInt32:
      return StoreAs<int32_t>(p, static_cast<int32_t>(v));
    case DataType::kInt64:
      return StoreAs<int64_t>(p, static_cast<int64_t>(v));
  }
}

void TypedBuffer::Fill(double v) {
  for (size_t i = 0; i < count(); ++i) Set(i, v);
}

double ReductionInput(DataType t, ReduceOp op, int rank, size_t i) {
  const uint64_t h = i * 7 + static_cast<uint64_t>(rank) * 13 + (i >> 5) * 3;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const double v = static_cast<double>(h % 9);  // 0..8
      return IsUnsigned(t) ? v : v - 4;             // -4..4
    }
    case ReduceOp::kProd: {
      static const double kSigned[3] = {1, -1, 2};
      return IsUnsigned(t) ? static_cast<double>(1 + h % 2) : kSigned[h % 3];
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin: {
      const double v = static_cast<double>((i * 31 + static_cast<uint64_t>(rank) * 17) % 101);
      return IsUnsigned(t) ? v : v - 50;
    }
  }
  return 0;
}

double TagValue(DataType t, int rank, size_t i) {
  const double v = static_cast<double>((i * 7 + static_cast<uint64_t>(rank) * 31 + (i >> 7)) % 97);
  return IsUnsigned(t) ? v : v - 48;
}

double ReductionReference(DataType t, ReduceOp op, int n, size_t i) {
  double acc = ReductionInput(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double x = ReductionInput(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += x;
        break;
      case ReduceOp::kProd:
        acc *= x;
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, x);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, x);
        break;
    }
  }
  if (op == ReduceOp::kAvg) acc = IsFloat(t) ? acc / n : std::trunc(acc / n);
  return acc;
}

bool Matches(DataType t, ReduceOp op, double got, double want) {
  if (op != ReduceOp::kAvg || !IsFloat(t)) return got == want;
  double rel = 1e-12;
  if (t == DataType::kFloat32) rel = 1e-6;
  if (t == DataType::kFloat16) rel = 1.0 / 1024;
  if (t == DataType::kBFloat16) rel = 1.0 / 128;
  return std::fabs(got - want) <= rel * std::fabs(want) + 1e-30;
}

}  // namespace chorus::testing
