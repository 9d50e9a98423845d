#include "nccl/scale.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace chorus::nccl {
namespace {

template <typename T>
void Scale(void* buf, size_t count, const void* scalar) {
  T s;
  std::memcpy(&s, scalar, sizeof(T));
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] * s);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Scale16(void* buf, size_t count, const void* scalar) {
  uint16_t sbits;
  std::memcpy(&sbits, scalar, 2);
  const float s = ToF(sbits);
  auto* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = FromF(ToF(p[i]) * s);
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1U;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffU;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant != 0 ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400U), exp - 25);
  }
  return sign != 0 ? -v : v;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000U);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00U);
  if (a >= 65520.0F) return static_cast<uint16_t>(sign | 0x7c00U);
  if (a < std::ldexp(1.0F, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even by nearbyint.
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  int e;
  const float m = std::frexp(a, &e);                                     // a = m * 2^e, m in [0.5, 1)
  auto mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 11 bits incl. the hidden one
  if (mant == 2048U) {
    mant = 1024U;
    ++e;
  }
  const uint32_t exp = static_cast<uint32_t>(e + 14);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00U);
  return static_cast<uint16_t>(sign | (exp << 10) | (mant & 0x3ffU));
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40U);
  x += 0x7fffU + ((x >> 16) & 1U);
  return static_cast<uint16_t>(x >> 16);
}

Status ScaleInPlace(ncclDataType_t dtype, void* buf, size_t count, const void* scalar) {
  switch (dtype) {
    case ncclInt8: Scale<int8_t>(buf, count, scalar); break;
    case ncclUint8: Scale<uint8_t>(buf, count, scalar); break;
    case ncclInt32: Scale<int32_t>(buf, count, scalar); break;
    case ncclUint32: Scale<uint32_t>(buf, count, scalar); break;
    case ncclInt64: Scale<int64_t>(buf, count, scalar); break;
    case ncclUint64: Scale<uint64_t>(buf, count, scalar); break;
    case ncclFloat16: Scale16<HalfToFloat, FloatToHalf>(buf, count, scalar); break;
    case ncclFloat32: Scale<float>(buf, count, scalar); break;
    case ncclFloat64: Scale<double>(buf, count, scalar); break;
    case ncclBfloat16: Scale16<Bf16ToFloat, FloatToBf16>(buf, count, scalar); break;
    default: return InvalidArgument("PreMulSum: invalid datatype " + std::to_string(dtype));
  }
  return Status::Ok();
}

}  // namespace chorus::nccl
