#include "common/types.h"

#include <strings.h>

namespace chorus {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUint8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "invalid-dtype";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid-op";
}

Result<DataType> ParseDataType(const std::string& name) {
  struct Alias {
    const char* name;
    DataType type;
  };
  static const Alias kAliases[] = {
      {"float32", DataType::kFloat32},   {"float", DataType::kFloat32},  {"fp32", DataType::kFloat32},
      {"float64", DataType::kFloat64},   {"double", DataType::kFloat64}, {"fp64", DataType::kFloat64},
      {"float16", DataType::kFloat16},   {"half", DataType::kFloat16},   {"fp16", DataType::kFloat16},
      {"bfloat16", DataType::kBFloat16}, {"bf16", DataType::kBFloat16},  {"int8", DataType::kInt8},
      {"char", DataType::kInt8},         {"uint8", DataType::kUint8},    {"byte", DataType::kUint8},
      {"int32", DataType::kInt32},       {"int", DataType::kInt32},      {"int64", DataType::kInt64},
      {"long", DataType::kInt64},
  };
  for (const Alias& a : kAliases) {
    if (strcasecmp(a.name, name.c_str()) == 0) return a.type;
  }
  return InvalidArgument("unknown dtype '" + name +
                         "' (expected float32, float64, float16, bfloat16, int8, uint8, int32 or int64)");
}

Result<ReduceOp> ParseReduceOp(const std::string& name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    ReduceOp op = static_cast<ReduceOp>(i);
    if (strcasecmp(ReduceOpName(op), name.c_str()) == 0) return op;
  }
  return InvalidArgument("unknown reduce op '" + name + "' (expected sum, prod, max, min or avg)");
}

}  // namespace chorus
