// The scaling half of PreMulSum on host buffers: multiplies count elements by one scalar
// of the same NCCL type (fp16 and bf16 through float, rounded to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "nccl/nccl.h"

namespace chorus::nccl {

Status ScaleInPlace(ncclDataType_t dtype, void* buf, size_t count, const void* scalar);

// fp16 / bf16 bits to and from float, for the scaling and the tests' references.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

}  // namespace chorus::nccl
