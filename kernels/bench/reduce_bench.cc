// Throughput of the two-input Reduce (dst = a op b) on the AVX2 and the portable
// path, beside baselines measured in the same run: a plain `c[i] = a[i] + b[i]` float
// loop as the compiler vectorises it (SSE2 and AVX2), and memcpy. `avx2/plain`
// compares a kernel with the AVX2 plain loop of the same buffer size.
//
// GB/s counts the bytes the caller asked to move: 2 reads + 1 write per element for
// Reduce and the plain loop (3 x buffer size), 1 read + 1 write for memcpy. The
// hardware moves more for out-of-cache sizes (the write-allocate read of dst), which
// is the same for every row, so rows compare fairly.
//
// Every timed kernel's output is checked after its timing (dst is poisoned first, so
// a kernel that skips elements is caught): inputs are small integers, exact in every
// dtype, so the expected value is exact too. `wrong` counts mismatching elements.
//
// Usage: reduce_bench [--trials=N] [--min_ms=MS] [--max_mib=MIB]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "kernels/reduce_internal.h"

namespace chorus {
namespace kernels {
namespace {

struct Options {
  int trials = 5;      // best of this many timed batches
  double min_ms = 30;  // each batch repeats the call for at least this long
  size_t max_bytes = 64u << 20;
};

// Page-aligned heap memory (Reduce itself does not care, but the baselines and the
// kernels then all start on the same alignment).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : mem_(static_cast<uint8_t*>(std::aligned_alloc(4096, RoundUp(bytes)))) {}
  uint8_t* data() const { return mem_.get(); }
  explicit operator bool() const { return mem_ != nullptr; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  static size_t RoundUp(size_t bytes) { return (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096; }
  std::unique_ptr<uint8_t, Free> mem_;
};

// Small integers: sums stay within [-63, 126] (exact in int8/uint8 and in bf16's 8
// significant bits), so every dtype represents inputs and results exactly.
bool IsUnsigned(DataType t) { return t == DataType::kUint8; }
int64_t ValueA(DataType t, size_t i) { return static_cast<int64_t>(i % 61) - (IsUnsigned(t) ? 0 : 30); }
int64_t ValueB(DataType t, size_t i) { return static_cast<int64_t>((i * 7) % 67) - (IsUnsigned(t) ? 0 : 33); }

void Put(DataType t, uint8_t* base, size_t i, int64_t v) {
  switch (t) {
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      memcpy(base + 4 * i, &f, 4);
      break;
    }
    case DataType::kFloat64: {
      double d = static_cast<double>(v);
      memcpy(base + 8 * i, &d, 8);
      break;
    }
    case DataType::kFloat16: {
      uint16_t h = FloatToHalf(static_cast<float>(v));
      memcpy(base + 2 * i, &h, 2);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t h = FloatToBFloat16(static_cast<float>(v));
      memcpy(base + 2 * i, &h, 2);
      break;
    }
    case DataType::kInt8: {
      int8_t x = static_cast<int8_t>(v);
      memcpy(base + i, &x, 1);
      break;
    }
    case DataType::kUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      memcpy(base + i, &x, 1);
      break;
    }
    case DataType::kInt32: {
      int32_t x = static_cast<int32_t>(v);
      memcpy(base + 4 * i, &x, 4);
      break;
    }
    case DataType::kInt64: memcpy(base + 8 * i, &v, 8); break;
  }
}

// The element as a double (NaN for a float NaN, e.g. left-over poison).
double Get(DataType t, const uint8_t* base, size_t i) {
  switch (t) {
    case DataType::kFloat32: {
      float f;
      memcpy(&f, base + 4 * i, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      memcpy(&d, base + 8 * i, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      memcpy(&h, base + 2 * i, 2);
      return HalfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      memcpy(&h, base + 2 * i, 2);
      return BFloat16ToFloat(h);
    }
    case DataType::kInt8: {
      int8_t x;
      memcpy(&x, base + i, 1);
      return x;
    }
    case DataType::kUint8: {
      uint8_t x;
      memcpy(&x, base + i, 1);
      return x;
    }
    case DataType::kInt32: {
      int32_t x;
      memcpy(&x, base + 4 * i, 4);
      return x;
    }
    case DataType::kInt64: {
      int64_t x;
      memcpy(&x, base + 8 * i, 8);
      return static_cast<double>(x);
    }
  }
  return NAN;
}

size_t CountWrong(DataType t, ReduceOp op, const uint8_t* dst, size_t count) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const int64_t a = ValueA(t, i), b = ValueB(t, i);
    const int64_t want = op == ReduceOp::kMax ? std::max(a, b) : a + b;
    if (!(Get(t, dst, i) == static_cast<double>(want))) ++wrong;
  }
  return wrong;
}

using Clock = std::chrono::steady_clock;

// Seconds per call: the best over `trials` batches, each long enough to time well.
template <typename Fn>
double BestSecondsPerCall(const Options& opt, Fn&& fn) {
  fn();  // warm caches, TLB and the branch predictors
  const auto t0 = Clock::now();
  fn();
  const double one = std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
  const long reps = std::max(1L, static_cast<long>(opt.min_ms * 1e-3 / one));
  double best = 1e30;
  for (int trial = 0; trial < opt.trials; ++trial) {
    const auto start = Clock::now();
    for (long r = 0; r < reps; ++r) fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / reps);
  }
  return best;
}

// The baselines: a plain loop as the compiler vectorises it (this binary is built
// with -O3, see BUILD): once for the x86-64 baseline ISA (SSE2) and once for AVX2.
__attribute__((noinline)) void PlainAdd(float* __restrict c, const float* __restrict a, const float* __restrict b,
                                        size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
#if defined(__x86_64__)
__attribute__((noinline, target("avx2"))) void PlainAddAvx2(float* __restrict c, const float* __restrict a,
                                                            const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
#else
void PlainAddAvx2(float* c, const float* a, const float* b, size_t n) { PlainAdd(c, a, b, n); }
#endif

std::string SizeName(size_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20)) {
    snprintf(buf, sizeof(buf), "%zu MiB", bytes >> 20);
  } else {
    snprintf(buf, sizeof(buf), "%zu KiB", bytes >> 10);
  }
  return buf;
}

double GBps(double bytes, double seconds) { return bytes / seconds / 1e9; }

struct Row {
  DataType dtype;
  ReduceOp op;
};

int Run(const Options& opt) {
  const size_t max_bytes = opt.max_bytes;
  AlignedBuffer a(max_bytes), b(max_bytes), dst(max_bytes);
  if (!a || !b || !dst) {
    fprintf(stderr, "reduce_bench: cannot allocate 3 x %zu bytes\n", max_bytes);
    return 1;
  }
  const bool avx2 = internal::Avx2Supported();
  printf("chorus reduce bench: default path %s; best of %d batches of >= %.0f ms each\n", ActiveReduceIsa(), opt.trials,
         opt.min_ms);
  printf("GB/s = (2 reads + 1 write) x buffer bytes / time (memcpy: 1 read + 1 write); 'size' is one buffer\n");
  printf("wrong = mismatching elements in the last timed output (avx2/scalar)\n\n");

  const Row rows[] = {
      {DataType::kFloat32, ReduceOp::kSum},  {DataType::kFloat64, ReduceOp::kSum},
      {DataType::kFloat16, ReduceOp::kSum},  {DataType::kBFloat16, ReduceOp::kSum},
      {DataType::kInt8, ReduceOp::kSum},     {DataType::kUint8, ReduceOp::kSum},
      {DataType::kInt32, ReduceOp::kSum},    {DataType::kInt64, ReduceOp::kSum},
      {DataType::kFloat32, ReduceOp::kMax},  {DataType::kFloat16, ReduceOp::kMax},
      {DataType::kBFloat16, ReduceOp::kMax}, {DataType::kInt32, ReduceOp::kMax},
  };
  size_t total_wrong = 0;
  int failed_calls = 0;
  for (size_t size : {size_t{4} << 10, size_t{32} << 10, size_t{1} << 20, size_t{64} << 20}) {
    if (size > max_bytes) continue;
    const double moved = 3.0 * static_cast<double>(size);

    // Baselines on float data.
    const size_t nf = size / sizeof(float);
    float* fa = reinterpret_cast<float*>(a.data());
    float* fb = reinterpret_cast<float*>(b.data());
    float* fc = reinterpret_cast<float*>(dst.data());
    for (size_t i = 0; i < nf; ++i) {
      Put(DataType::kFloat32, a.data(), i, ValueA(DataType::kFloat32, i));
      Put(DataType::kFloat32, b.data(), i, ValueB(DataType::kFloat32, i));
    }
    memset(dst.data(), 0xFF, size);
    const double sse_gbps = GBps(moved, BestSecondsPerCall(opt, [&] { PlainAdd(fc, fa, fb, nf); }));
    size_t plain_wrong = CountWrong(DataType::kFloat32, ReduceOp::kSum, dst.data(), nf);
    // With AVX2 the kernels are compared with the AVX2 loop, else with the SSE2 one.
    double plain_gbps = sse_gbps;
    if (avx2) {
      memset(dst.data(), 0xFF, size);
      plain_gbps = GBps(moved, BestSecondsPerCall(opt, [&] { PlainAddAvx2(fc, fa, fb, nf); }));
      plain_wrong += CountWrong(DataType::kFloat32, ReduceOp::kSum, dst.data(), nf);
    }
    memset(dst.data(), 0xFF, size);
    const double memcpy_gbps = GBps(2.0 * size, BestSecondsPerCall(opt, [&] { memcpy(dst.data(), a.data(), size); }));
    const size_t memcpy_wrong = memcmp(dst.data(), a.data(), size) == 0 ? 0 : 1;
    total_wrong += plain_wrong + memcpy_wrong;

    char plain_avx2_col[16] = "n/a";
    if (avx2) snprintf(plain_avx2_col, sizeof(plain_avx2_col), "%.1f", plain_gbps);
    printf(
        "== size %s: plain float c[i]=a[i]+b[i]: sse2 %.1f GB/s, avx2 %s GB/s (wrong %zu); memcpy %.1f GB/s "
        "(wrong %zu)\n",
        SizeName(size).c_str(), sse_gbps, plain_avx2_col, plain_wrong, memcpy_gbps, memcpy_wrong);
    printf("  %-9s %-4s %12s %12s %9s %10s %9s\n", "dtype", "op", "avx2 GB/s", "scalar GB/s", "speedup", "avx2/plain",
           "wrong");
    for (const Row& row : rows) {
      const size_t count = size / DataTypeSize(row.dtype);
      for (size_t i = 0; i < count; ++i) {
        Put(row.dtype, a.data(), i, ValueA(row.dtype, i));
        Put(row.dtype, b.data(), i, ValueB(row.dtype, i));
      }
      double gbps[2] = {0, 0};  // [0] avx2, [1] scalar
      size_t wrong[2] = {0, 0};
      for (int path = 0; path < 2; ++path) {
        if (path == 0 && !avx2) continue;
        internal::SetForceScalarForTesting(path == 1);
        memset(dst.data(), 0xFF, size);  // poison: a skipped element reads as wrong
        bool ok = true;
        const double s = BestSecondsPerCall(
            opt, [&] { ok = Reduce(row.dtype, row.op, dst.data(), a.data(), b.data(), count).ok() && ok; });
        if (!ok) ++failed_calls;
        gbps[path] = GBps(moved, s);
        wrong[path] = CountWrong(row.dtype, row.op, dst.data(), count);
        total_wrong += wrong[path];
      }
      internal::SetForceScalarForTesting(false);
      char avx2_col[16] = "n/a", speed_col[16] = "n/a", plain_col[16] = "n/a";
      if (avx2) {
        snprintf(avx2_col, sizeof(avx2_col), "%.1f", gbps[0]);
        snprintf(speed_col, sizeof(speed_col), "%.2fx", gbps[0] / gbps[1]);
        snprintf(plain_col, sizeof(plain_col), "%.2f", gbps[0] / plain_gbps);
      }
      char wrong_col[48];
      snprintf(wrong_col, sizeof(wrong_col), "%zu/%zu", wrong[0], wrong[1]);
      printf("  %-9s %-4s %12s %12.1f %9s %10s %9s\n", DataTypeName(row.dtype), ReduceOpName(row.op), avx2_col, gbps[1],
             speed_col, plain_col, wrong_col);
    }
    printf("\n");
  }
  printf("total wrong elements: %zu, failed calls: %d\n", total_wrong, failed_calls);
  return total_wrong == 0 && failed_calls == 0 ? 0 : 1;
}

// Flags are --name=value; an unknown flag or a bad value is an error naming it.
bool ParseFlags(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && end != nullptr && *end == '\0' && v > 0;
    if (name == "--trials" && number) {
      opt->trials = static_cast<int>(v);
    } else if (name == "--min_ms" && number) {
      opt->min_ms = v;
    } else if (name == "--max_mib" && number) {
      opt->max_bytes = static_cast<size_t>(v * (1 << 20));
    } else {
      fprintf(stderr, "reduce_bench: bad flag '%s' (usage: [--trials=N] [--min_ms=MS] [--max_mib=MIB])\n", arg.c_str());
      return false;
    }
  }
  if (opt->trials < 1 || opt->max_bytes < 4096) {
    fprintf(stderr, "reduce_bench: --trials must be >= 1 and --max_mib >= 1/256\n");
    return false;
  }
  return true;
}

}  // namespace
}  // namespace kernels
}  // namespace chorus

int main(int argc, char** argv) {
  chorus::kernels::Options opt;
  if (!chorus::kernels::ParseFlags(argc, argv, &opt)) return 2;
  return chorus::kernels::Run(opt);
}
