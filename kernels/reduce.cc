// Public entry points: argument checks with messages naming the bad value, then the
// AVX2 or the portable path, chosen once per process from the CPU's features.
#include "kernels/reduce.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kernels/reduce_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace chorus {
namespace kernels {
namespace internal {
namespace {

std::atomic<bool> force_scalar{false};

bool DetectAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's check also asks the OS (XGETBV) whether it saves the YMM registers.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  // F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

}  // namespace

bool Avx2Supported() {
  static const bool supported = DetectAvx2();
  return supported;
}

void SetForceScalarForTesting(bool force) { force_scalar.store(force, std::memory_order_relaxed); }

bool UseAvx2() { return Avx2Supported() && !force_scalar.load(std::memory_order_relaxed); }

}  // namespace internal

namespace {

// The checks below run on every call, also for small chunks, so the happy path only
// compares; the messages are built once something is wrong.
bool EnumsValid(DataType dtype, ReduceOp op) {
  return static_cast<int>(dtype) < kNumDataTypes && static_cast<int>(op) < kNumReduceOps;
}

Status EnumError(const char* fn, DataType dtype, ReduceOp op) {
  if (static_cast<int>(dtype) >= kNumDataTypes) {
    return InvalidArgument(std::string(fn) + ": invalid DataType value " + std::to_string(static_cast<int>(dtype)) +
                           " (valid: 0.." + std::to_string(kNumDataTypes - 1) + ")");
  }
  return InvalidArgument(std::string(fn) + ": invalid ReduceOp value " + std::to_string(static_cast<int>(op)) +
                         " (valid: 0.." + std::to_string(kNumReduceOps - 1) + ")");
}

// count elements of dtype fit in the address space.
bool CountFits(DataType dtype, size_t count) {
  size_t bytes;
  return !__builtin_mul_overflow(count, DataTypeSize(dtype), &bytes);
}

struct NamedBuffer {
  const char* name;
  const void* p;
};

// The first null buffer, else the count overflow. Call only when one of them is wrong.
Status BufferError(const char* fn, std::initializer_list<NamedBuffer> buffers, DataType dtype, size_t count) {
  for (const NamedBuffer& b : buffers) {
    if (b.p == nullptr) {
      return InvalidArgument(std::string(fn) + ": " + b.name + " is null with count " + std::to_string(count) + " (" +
                             DataTypeName(dtype) + ")");
    }
  }
  return InvalidArgument(std::string(fn) + ": count " + std::to_string(count) + " of " + DataTypeName(dtype) +
                         " overflows the address space");
}

}  // namespace

Status Reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (!EnumsValid(dtype, op)) return EnumError("Reduce", dtype, op);
  if (count == 0) return Status::Ok();
  if (dst == nullptr || a == nullptr || b == nullptr || !CountFits(dtype, count)) {
    return BufferError("Reduce", {{"dst", dst}, {"a", a}, {"b", b}}, dtype, count);
  }
  const ReduceOp eop = ElementwiseOp(op);
  if (internal::UseAvx2()) {
    internal::ReduceAvx2(dtype, eop, dst, a, b, count);
  } else {
    internal::ReduceScalar(dtype, eop, dst, a, b, count);
  }
  return Status::Ok();
}

Status ReduceInPlace(DataType dtype, ReduceOp op, void* acc, const void* in, size_t count) {
  if (!EnumsValid(dtype, op)) return EnumError("ReduceInPlace", dtype, op);
  if (count == 0) return Status::Ok();
  if (acc == nullptr || in == nullptr || !CountFits(dtype, count)) {
    return BufferError("ReduceInPlace", {{"acc", acc}, {"in", in}}, dtype, count);
  }
  return Reduce(dtype, op, acc, acc, in, count);
}

Status ReduceN(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count) {
  if (!EnumsValid(dtype, op)) return EnumError("ReduceN", dtype, op);
  if (n < 1) return InvalidArgument("ReduceN: n must be >= 1, got " + std::to_string(n));
  if (count == 0) return Status::Ok();
  if (inputs == nullptr) return InvalidArgument("ReduceN: inputs array is null (n = " + std::to_string(n) + ")");
  if (dst == nullptr || !CountFits(dtype, count)) return BufferError("ReduceN", {{"dst", dst}}, dtype, count);
  for (int k = 0; k < n; ++k) {
    if (inputs[k] == nullptr) {
      const std::string name = "inputs[" + std::to_string(k) + "]";
      return BufferError("ReduceN", {{name.c_str(), nullptr}}, dtype, count);
    }
  }
  if (n == 1) {
    if (dst != inputs[0]) memmove(dst, inputs[0], count * DataTypeSize(dtype));
    return Status::Ok();
  }
  const ReduceOp eop = ElementwiseOp(op);
  if (internal::UseAvx2()) {
    internal::ReduceNAvx2(dtype, eop, dst, inputs, n, count);
  } else {
    internal::ReduceNScalar(dtype, eop, dst, inputs, n, count);
  }
  return Status::Ok();
}

Status ScaleForAvg(DataType dtype, void* buf, size_t count, int n) {
  if (!EnumsValid(dtype, ReduceOp::kAvg)) return EnumError("ScaleForAvg", dtype, ReduceOp::kAvg);
  if (n < 1) return InvalidArgument("ScaleForAvg: n (number of contributions) must be >= 1, got " + std::to_string(n));
  if (count == 0 || n == 1) return Status::Ok();
  if (buf == nullptr || !CountFits(dtype, count)) return BufferError("ScaleForAvg", {{"buf", buf}}, dtype, count);
  if (internal::UseAvx2() && internal::ScaleForAvgAvx2(dtype, buf, count, n)) return Status::Ok();
  internal::ScaleForAvgScalar(dtype, buf, count, n);
  return Status::Ok();
}

const char* ActiveReduceIsa() { return internal::UseAvx2() ? "avx2" : "scalar"; }

}  // namespace kernels
}  // namespace chorus
