// The portable path: one element at a time through the functors of elementwise.h.
// It is the reference the AVX2 path must match bit for bit, and the fallback on CPUs
// without AVX2. Elements are moved with memcpy because buffers may be unaligned.
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/reduce_internal.h"

namespace chorus {
namespace kernels {
namespace internal {
namespace {

template <typename S>
inline S LoadAt(const void* base, size_t i) {
  S v;
  memcpy(&v, static_cast<const char*>(base) + i * sizeof(S), sizeof(S));
  return v;
}

template <typename S>
inline void StoreAt(void* base, size_t i, S v) {
  memcpy(static_cast<char*>(base) + i * sizeof(S), &v, sizeof(S));
}

template <typename S, typename Op>
void BinaryLoop(void* dst, const void* a, const void* b, size_t count) {
  using T = StorageTraits<S>;
  const Op op;
  for (size_t i = 0; i < count; ++i) {
    StoreAt<S>(dst, i, T::Store(op(T::Load(LoadAt<S>(a, i)), T::Load(LoadAt<S>(b, i)))));
  }
}

template <typename S, typename Op>
void NAryLoop(void* dst, const void* const* inputs, int n, size_t count) {
  using T = StorageTraits<S>;
  const Op op;
  for (size_t i = 0; i < count; ++i) {
    typename T::Compute acc = T::Load(LoadAt<S>(inputs[0], i));
    for (int k = 1; k < n; ++k) acc = op(acc, T::Load(LoadAt<S>(inputs[k], i)));
    StoreAt<S>(dst, i, T::Store(acc));
  }
}

template <typename S>
void ScaleLoop(void* buf, size_t count, int n) {
  using T = StorageTraits<S>;
  using C = typename T::Compute;
  if constexpr (std::is_integral<C>::value) {
    for (size_t i = 0; i < count; ++i) StoreAt<S>(buf, i, ScaleForAvgOne<S>(LoadAt<S>(buf, i), n));
  } else {
    const C factor = AvgFactor<C>(n);
    for (size_t i = 0; i < count; ++i) StoreAt<S>(buf, i, T::Store(T::Load(LoadAt<S>(buf, i)) * factor));
  }
}

}  // namespace

void ReduceScalar(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  VisitDataType(dtype, [&](auto s) {
    VisitReduceOp(op, [&](auto f) { BinaryLoop<decltype(s), decltype(f)>(dst, a, b, count); });
  });
}

void ReduceNScalar(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count) {
  VisitDataType(dtype, [&](auto s) {
    VisitReduceOp(op, [&](auto f) { NAryLoop<decltype(s), decltype(f)>(dst, inputs, n, count); });
  });
}

void ScaleForAvgScalar(DataType dtype, void* buf, size_t count, int n) {
  VisitDataType(dtype, [&](auto s) { ScaleLoop<decltype(s)>(buf, count, n); });
}

}  // namespace internal
}  // namespace kernels
}  // namespace chorus
