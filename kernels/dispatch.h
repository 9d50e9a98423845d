// Turns run-time (DataType, ReduceOp) values into compile-time types: the visitor is
// called with a value of the storage type and of the functor type, and instantiates
// one loop per pair. Callers validate the enums first; an unknown value calls nothing
// and returns false.
#pragma once

#include <cstdint>

#include "common/types.h"
#include "kernels/elementwise.h"

namespace chorus {
namespace kernels {
inline namespace CHORUS_KERNELS_ISA {

template <typename Visitor>
bool VisitDataType(DataType dtype, Visitor&& visit) {
  switch (dtype) {
    case DataType::kFloat32: visit(float{}); return true;
    case DataType::kFloat64: visit(double{}); return true;
    case DataType::kFloat16: visit(Half{}); return true;
    case DataType::kBFloat16: visit(BFloat16{}); return true;
    case DataType::kInt8: visit(int8_t{}); return true;
    case DataType::kUint8: visit(uint8_t{}); return true;
    case DataType::kInt32: visit(int32_t{}); return true;
    case DataType::kInt64: visit(int64_t{}); return true;
  }
  return false;
}

// kAvg is visited as SumOp: the average's division is a separate pass (ScaleForAvg).
template <typename Visitor>
bool VisitReduceOp(ReduceOp op, Visitor&& visit) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: visit(SumOp{}); return true;
    case ReduceOp::kProd: visit(ProdOp{}); return true;
    case ReduceOp::kMax: visit(MaxOp{}); return true;
    case ReduceOp::kMin: visit(MinOp{}); return true;
  }
  return false;
}

}  // namespace CHORUS_KERNELS_ISA
}  // namespace kernels
}  // namespace chorus
