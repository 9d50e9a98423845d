// cuda_reduce_bench: the CUDA reduction kernel's bandwidth beside a device-to-device
// cudaMemcpy in the same run (bytes read + written per second for both), results
// checked against the CPU kernels (#wrong). Rows "sum": two inputs into one output
// (cuda::Reduce); rows "sum2x2": two inputs into two outputs in one pass
// (cuda::ReduceNToAll, the one-GPU all_reduce led by rank 0). Prints why and exits 0
// with no GPU.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/types.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace cu = chorus::kernels::cuda;
using chorus::DataType;
using chorus::ReduceOp;

namespace {

// Whether the element at p is a NaN (float types; integers never are), decoded as the
// kernels decode it.
bool IsNan(DataType t, const unsigned char* p) {
  auto bits = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case DataType::kFloat32: return std::isnan(bits(float{}));
    case DataType::kFloat64: return std::isnan(bits(double{}));
    case DataType::kFloat16: return std::isnan(chorus::kernels::HalfToFloat(bits(uint16_t{})));
    case DataType::kBFloat16: return std::isnan(chorus::kernels::BFloat16ToFloat(bits(uint16_t{})));
    default: return false;
  }
}

// Random bytes, eight at a time.
void Fill(std::vector<unsigned char>& v, std::mt19937_64& rng) {
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(&v[i], &r, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<unsigned char>(rng());
}

}  // namespace

int main() {
  chorus::Status dev = cu::DeviceStatus();
  if (!dev.ok()) {
    std::printf("# SKIPPED: %s\n", dev.message().c_str());
    return 0;
  }
  std::printf("# %-9s %-6s %12s %10s %10s %10s %7s\n", "dtype", "op", "bytes", "reduce", "memcpy", "ratio", "#wrong");
  std::printf("# %-9s %-6s %12s %10s %10s %10s %7s\n", "", "", "(per input)", "(GB/s)", "(GB/s)", "", "");
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kFloat64, DataType::kInt8,    DataType::kInt32};
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{256} << 20}) {
    for (DataType t : types) {
      const size_t es = chorus::DataTypeSize(t), count = bytes / es;
      std::vector<unsigned char> ha(bytes), hb(bytes), hd(bytes), want(bytes);
      std::mt19937_64 rng(bytes + es);
      Fill(ha, rng);
      Fill(hb, rng);
      auto a = cu::DeviceBuffer::Allocate(bytes), b = cu::DeviceBuffer::Allocate(bytes),
           d = cu::DeviceBuffer::Allocate(bytes);
      if (!a.ok() || !b.ok() || !d.ok()) {
        std::printf("# allocation of 3 x %zu bytes failed\n", bytes);
        return 1;
      }
      if (!cu::CopyToDevice(a->get(), ha.data(), bytes).ok() || !cu::CopyToDevice(b->get(), hb.data(), bytes).ok())
        return 1;
      const int iters = bytes >= (size_t{256} << 20) ? 20 : 100;
      // Warm-up: the first launch loads the kernel (lazy loading) and touches the pages.
      (void)cu::Reduce(t, ReduceOp::kSum, d->get(), a->get(), b->get(), count, nullptr);
      (void)cu::CopyDeviceToDevice(d->get(), a->get(), bytes, nullptr);
      auto red = cu::TimeMs(
          iters, [&] { return cu::Reduce(t, ReduceOp::kSum, d->get(), a->get(), b->get(), count, nullptr); });
      auto cpy = cu::TimeMs(iters, [&] { return cu::CopyDeviceToDevice(d->get(), a->get(), bytes, nullptr); });
      // The check: one more reduce, compared bit for bit with the CPU kernel.
      if (!red.ok() || !cpy.ok() || !cu::Reduce(t, ReduceOp::kSum, d->get(), a->get(), b->get(), count, nullptr).ok() ||
          !cu::CopyToHost(hd.data(), d->get(), bytes).ok() ||
          !chorus::kernels::Reduce(t, ReduceOp::kSum, want.data(), ha.data(), hb.data(), count).ok()) {
        std::printf("# %s: %s\n", chorus::DataTypeName(t),
                    (!red.ok() ? red.status() : cpy.status()).ToString().c_str());
        return 1;
      }
      // Bit for bit, except that any NaN equals any NaN (the GPU writes the canonical one).
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        wrong +=
            std::memcmp(&hd[i * es], &want[i * es], es) != 0 && !(IsNan(t, &hd[i * es]) && IsNan(t, &want[i * es]));
      }
      const double red_gbs = 3.0 * bytes / (red.value() * 1e6);  // read a, b; write dst
      const double cpy_gbs = 2.0 * bytes / (cpy.value() * 1e6);  // read src; write dst
      std::printf("  %-9s %-6s %12zu %10.1f %10.1f %10.2f %7zu\n", chorus::DataTypeName(t), "sum", bytes, red_gbs,
                  cpy_gbs, red_gbs / cpy_gbs, wrong);
      if (bytes < (size_t{16} << 20) || (t != DataType::kFloat32 && t != DataType::kBFloat16)) continue;
      // Two inputs into two outputs, as RunLedByRankZero does for two ranks.
      auto e = cu::DeviceBuffer::Allocate(bytes);
      if (!e.ok()) {
        std::printf("# allocation of a fourth %zu bytes failed\n", bytes);
        return 1;
      }
      const void* in[2] = {a->get(), b->get()};
      void* out[2] = {d->get(), e->get()};
      auto to_all = [&] { return cu::ReduceNToAll(t, ReduceOp::kSum, out, 2, in, 2, count, nullptr); };
      (void)to_all();
      auto two = cu::TimeMs(iters, to_all);
      std::vector<unsigned char> he(bytes);
      if (!two.ok() || !cu::CopyToHost(hd.data(), d->get(), bytes).ok() ||
          !cu::CopyToHost(he.data(), e->get(), bytes).ok()) {
        std::printf("# %s: %s\n", chorus::DataTypeName(t), two.status().ToString().c_str());
        return 1;
      }
      wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        for (const std::vector<unsigned char>* got : {&hd, &he}) {
          const unsigned char* g = &(*got)[i * es];
          wrong += std::memcmp(g, &want[i * es], es) != 0 && !(IsNan(t, g) && IsNan(t, &want[i * es]));
        }
      }
      const double two_gbs = 4.0 * bytes / (two.value() * 1e6);  // read a, b; write d, e
      std::printf("  %-9s %-6s %12zu %10.1f %10.1f %10.2f %7zu\n", chorus::DataTypeName(t), "sum2x2", bytes, two_gbs,
                  cpy_gbs, two_gbs / cpy_gbs, wrong);
    }
  }
  return 0;
}
