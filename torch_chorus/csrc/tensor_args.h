// Tensor arguments as chorus takes them: the chorus type of a tensor, what a reduction
// maps to, flat staging buffers, and the names errors use. Shared by the CPU ops
// (process_group.cc) and the CUDA ones (cuda_ops.cc).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace torch_chorus {

using chorus::DataType;
using RedOp = c10d::ReduceOp::RedOpType;

inline std::optional<DataType> ChorusType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kUint8;  // one byte, 0 or 1
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default: return std::nullopt;
  }
}

// What a data-moving op sends: the tensor's chorus type, or its bytes where chorus has
// no such type (int16, complex, ...).
struct Elements {
  DataType dtype;
  size_t count;
};
inline Elements MovedAs(const at::Tensor& t) {
  if (std::optional<DataType> d = ChorusType(t.scalar_type())) return {*d, static_cast<size_t>(t.numel())};
  return {DataType::kUint8, static_cast<size_t>(t.nbytes())};
}

struct Reduction {
  DataType dtype;
  chorus::ReduceOp op;
};
inline Reduction ReducedAs(const at::Tensor& t, RedOp op, const char* name) {
  std::optional<DataType> d = ChorusType(t.scalar_type());
  TORCH_CHECK(d.has_value(), "chorus: ", name, " cannot reduce ", t.scalar_type(),
              " tensors (float32, float64, float16, bfloat16, int8, uint8, int32, int64 and bool can)");
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op) {
    // bool: SUM is a logical or, PRODUCT a logical and (as ProcessGroupNCCL does).
    case c10d::ReduceOp::SUM: return {*d, is_bool ? chorus::ReduceOp::kMax : chorus::ReduceOp::kSum};
    case c10d::ReduceOp::PRODUCT: return {*d, is_bool ? chorus::ReduceOp::kMin : chorus::ReduceOp::kProd};
    case c10d::ReduceOp::MIN: return {*d, chorus::ReduceOp::kMin};
    case c10d::ReduceOp::MAX: return {*d, chorus::ReduceOp::kMax};
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "chorus: ", name, " cannot average bool tensors");
      return {*d, chorus::ReduceOp::kAvg};
    default:
      TORCH_CHECK(false, "chorus: ", name, " does not support reduce op ", static_cast<int>(op),
                  " (SUM, PRODUCT, MIN, MAX, AVG; BAND, BOR, BXOR on integer and bool tensors)");
  }
}

inline bool IsBitwise(RedOp op) {
  return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

inline void CheckRoot(int64_t root, int size, const char* name) {
  TORCH_CHECK(root >= 0 && root < size, "chorus: ", name, ": root ", root, " is not a rank of this group (size ", size,
              ")");
}

inline void CheckCount(const std::vector<at::Tensor>& ts, size_t n, const char* name, const char* which) {
  TORCH_CHECK(ts.size() == n, "chorus: ", name, " needs ", n, " ", which, " tensors (one per rank), got ", ts.size());
}

// The tensor itself where it is contiguous, else a contiguous copy: chorus takes flat
// buffers.
inline at::Tensor Dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// One flat buffer of the tensors' elements, in order.
inline at::Tensor Packed(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of `flat` into `ts`.
inline void Unpack(const at::Tensor& flat, std::vector<at::Tensor>& ts, int64_t offset = 0) {
  for (at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// all_to_all_single's split sizes, which count rows (dim 0; empty means equal parts),
// as each peer's byte offset and byte count in `t`, checked against n ranks.
struct Splits {
  std::vector<size_t> offset;
  std::vector<size_t> bytes;
};
inline Splits SplitBytes(const at::Tensor& t, std::vector<int64_t> splits, int n, const char* which) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "chorus: all_to_all_single: ", which, " has ", rows, " rows, not divisible by ", n);
    splits.assign(n, rows / n);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == n, "chorus: all_to_all_single: ", splits.size(), " ", which,
              " split sizes for ", n, " ranks");
  int64_t total = 0;
  for (int64_t s : splits) {
    TORCH_CHECK(s >= 0, "chorus: all_to_all_single: negative ", which, " split size ", s);
    total += s;
  }
  TORCH_CHECK(total == rows, "chorus: all_to_all_single: ", which, " split sizes add up to ", total, ", it has ", rows,
              " rows");
  const size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
  Splits out{std::vector<size_t>(n), std::vector<size_t>(n)};
  size_t at = 0;
  for (int p = 0; p < n; ++p) {
    out.offset[p] = at;
    out.bytes[p] = static_cast<size_t>(splits[p]) * row_bytes;
    at += out.bytes[p];
  }
  return out;
}

inline void* Ptr(const at::Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }

inline std::string OpName(const char* name, const at::Tensor& t) {
  return std::string(name) + " of " + std::to_string(t.numel()) + " " + std::string(c10::toString(t.scalar_type()));
}

}  // namespace torch_chorus
