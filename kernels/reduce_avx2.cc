// The AVX2 path: 256-bit unaligned loads and stores, 4 blocks per iteration for two
// inputs. The tail (fewer elements than a register) is copied into a zeroed stack
// block, reduced with the same vector code and copied back, so tails round exactly
// like the body and nothing outside [0, count) is read or written.
//
// This file is compiled with -mavx2 -mf16c -mfma -ffp-contract=off (see BUILD) and
// only entered after reduce.cc's run-time CPU check. It must not instantiate standard
// library templates (std::string, containers): their out-of-line copies would carry
// AVX2 instructions under names the portable code shares.
#include "kernels/reduce_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_avx2.cc must be compiled with -mavx2 -mf16c"
#endif

#include <cstring>

#include "kernels/avx2_lanes.h"
#include "kernels/dispatch.h"

namespace chorus {
namespace kernels {
namespace internal {
namespace {

using avx2::LaneOp;
using avx2::LanesFor;

template <typename L>
constexpr size_t kBlockBytes = L::kLanes * sizeof(typename L::Storage);

// Loads `bytes` (< one block) into a zero-padded register.
template <typename L>
typename L::V LoadPartial(const char* p, size_t bytes) {
  alignas(32) char block[kBlockBytes<L>] = {};
  memcpy(block, p, bytes);
  return L::Load(block);
}

template <typename L>
void StorePartial(char* p, size_t bytes, typename L::V v) {
  alignas(32) char block[kBlockBytes<L>];
  L::Store(block, v);
  memcpy(p, block, bytes);
}

template <typename S, typename Op>
void BinaryLoop(void* dst_v, const void* a_v, const void* b_v, size_t count) {
  using L = typename LanesFor<S>::type;
  using F = LaneOp<Op>;
  constexpr size_t kStep = kBlockBytes<L>;
  char* dst = static_cast<char*>(dst_v);
  const char* a = static_cast<const char*>(a_v);
  const char* b = static_cast<const char*>(b_v);
  const size_t bytes = count * sizeof(S);
  size_t off = 0;
  for (; off + 4 * kStep <= bytes; off += 4 * kStep) {
    // Each block is loaded before it is stored, which is all that dst == a or dst == b
    // needs (partial overlap is not supported). Loading all four blocks first would
    // keep 16 registers live for bf16's register pairs and spill.
    for (size_t k = 0; k < 4; ++k) {
      const size_t o = off + k * kStep;
      L::Store(dst + o, F::template Apply<L>(L::Load(a + o), L::Load(b + o)));
    }
  }
  for (; off + kStep <= bytes; off += kStep) {
    L::Store(dst + off, F::template Apply<L>(L::Load(a + off), L::Load(b + off)));
  }
  if (off < bytes) {
    const size_t rest = bytes - off;
    StorePartial<L>(dst + off, rest,
                    F::template Apply<L>(LoadPartial<L>(a + off, rest), LoadPartial<L>(b + off, rest)));
  }
}

// fp16/bf16 stay in float registers across all n inputs and are rounded once.
template <typename S, typename Op>
void NAryLoop(void* dst_v, const void* const* inputs_v, int n, size_t count) {
  using L = typename LanesFor<S>::type;
  using F = LaneOp<Op>;
  constexpr size_t kStep = kBlockBytes<L>;
  char* dst = static_cast<char*>(dst_v);
  const char* const* in = reinterpret_cast<const char* const*>(inputs_v);
  const size_t bytes = count * sizeof(S);
  size_t off = 0;
  for (; off + 2 * kStep <= bytes; off += 2 * kStep) {
    auto acc0 = L::Load(in[0] + off);
    auto acc1 = L::Load(in[0] + off + kStep);
    for (int k = 1; k < n; ++k) {
      acc0 = F::template Apply<L>(acc0, L::Load(in[k] + off));
      acc1 = F::template Apply<L>(acc1, L::Load(in[k] + off + kStep));
    }
    L::Store(dst + off, acc0);
    L::Store(dst + off + kStep, acc1);
  }
  for (; off + kStep <= bytes; off += kStep) {
    auto acc = L::Load(in[0] + off);
    for (int k = 1; k < n; ++k) acc = F::template Apply<L>(acc, L::Load(in[k] + off));
    L::Store(dst + off, acc);
  }
  if (off < bytes) {
    const size_t rest = bytes - off;
    auto acc = LoadPartial<L>(in[0] + off, rest);
    for (int k = 1; k < n; ++k) acc = F::template Apply<L>(acc, LoadPartial<L>(in[k] + off, rest));
    StorePartial<L>(dst + off, rest, acc);
  }
}

template <typename S>
void ScaleLoop(void* buf_v, size_t count, int n) {
  using L = typename LanesFor<S>::type;
  constexpr size_t kStep = kBlockBytes<L>;
  const typename L::Factor factor = AvgFactor<typename L::Factor>(n);
  char* buf = static_cast<char*>(buf_v);
  const size_t bytes = count * sizeof(S);
  size_t off = 0;
  for (; off + kStep <= bytes; off += kStep) L::Store(buf + off, L::Scale(L::Load(buf + off), factor));
  if (off < bytes) {
    const size_t rest = bytes - off;
    StorePartial<L>(buf + off, rest, L::Scale(LoadPartial<L>(buf + off, rest), factor));
  }
}

}  // namespace

void ReduceAvx2(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  VisitDataType(dtype, [&](auto s) {
    VisitReduceOp(op, [&](auto f) { BinaryLoop<decltype(s), decltype(f)>(dst, a, b, count); });
  });
}

void ReduceNAvx2(DataType dtype, ReduceOp op, void* dst, const void* const* inputs, int n, size_t count) {
  VisitDataType(dtype, [&](auto s) {
    VisitReduceOp(op, [&](auto f) { NAryLoop<decltype(s), decltype(f)>(dst, inputs, n, count); });
  });
}

bool ScaleForAvgAvx2(DataType dtype, void* buf, size_t count, int n) {
  switch (dtype) {
    case DataType::kFloat32: ScaleLoop<float>(buf, count, n); return true;
    case DataType::kFloat64: ScaleLoop<double>(buf, count, n); return true;
    case DataType::kFloat16: ScaleLoop<Half>(buf, count, n); return true;
    case DataType::kBFloat16: ScaleLoop<BFloat16>(buf, count, n); return true;
    default: return false;
  }
}

}  // namespace internal
}  // namespace kernels
}  // namespace chorus

#else  // not x86: the AVX2 path does not exist; Avx2Supported() is false there.

namespace chorus {
namespace kernels {
namespace internal {
void ReduceAvx2(DataType, ReduceOp, void*, const void*, const void*, size_t) {}
void ReduceNAvx2(DataType, ReduceOp, void*, const void* const*, int, size_t) {}
bool ScaleForAvgAvx2(DataType, void*, size_t, int) { return false; }
}  // namespace internal
}  // namespace kernels
}  // namespace chorus

#endif
