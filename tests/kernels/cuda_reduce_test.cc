// The CUDA reduction kernels against the float64 reference (2 inputs) and the CPU
// kernels (N inputs, AVG scaling): every dtype x op, odd lengths, unaligned device
// offsets, random bits (NaN and inf included), poisoned guard bytes around the output.
// Without a GPU every case but the first skips, naming the runtime's reason.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"
#include "kernels/reduce.h"
#include "tests/kernels/test_util.h"

namespace chorus::kernels {
namespace {

using namespace testing;  // NOLINT: the kernel test helpers
namespace cu = cuda;

#define SKIP_WITHOUT_GPU() \
  if (Status _s = cu::DeviceStatus(); !_s.ok()) GTEST_SKIP() << _s.message()

constexpr size_t kGuard = 64;
constexpr uint8_t kPoison = 0xA5;
constexpr size_t kLengths[] = {0, 1, 7, 15, 33, 1023, 4099, (1u << 20) + 3};

TEST(CudaReduce, WithoutAGpuEveryCallSaysSoClearly) {
  Status st = cu::DeviceStatus();
  if (st.ok()) GTEST_SKIP() << "a GPU is present: " << cu::DeviceCount() << " device(s)";
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("no CUDA device"), std::string::npos) << st.message();
  int x = 0;
  Status r = cu::Reduce(DataType::kInt32, ReduceOp::kSum, &x, &x, &x, 1, nullptr);
  EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.ToString();
  EXPECT_FALSE(cu::DeviceBuffer::Allocate(16).ok());
}

// A CPU-only build (no toolkit, or --config=cpu_only) says so in every device call,
// naming what was asked, and reads every host pointer as host memory.
TEST(CudaReduce, CpuOnlyBuildSaysBuiltWithoutCuda) {
  if (cu::BuiltWithCuda()) GTEST_SKIP() << "built with CUDA";
  const std::string without = "chorus was built without CUDA: ";
  EXPECT_EQ(cu::DeviceStatus().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cu::DeviceStatus().message().rfind(without, 0), 0u) << cu::DeviceStatus().message();
  EXPECT_EQ(cu::DeviceCount(), 0);
  int x = 0;
  for (const Status& st :
       {cu::Reduce(DataType::kInt32, ReduceOp::kSum, &x, &x, &x, 1, nullptr), cu::CopyToDevice(&x, &x, 4),
        cu::Synchronize(nullptr), cu::LoadKernels(), cu::EnqueueWriteFlag(nullptr, &x, 1),
        cu::DeviceBuffer::Allocate(16).status(), cu::PinnedBuffer::Allocate(16).status(),
        cu::StreamEvent::Record(nullptr).status(), cu::CopyStream::Create().status(),
        cu::SignalFlags::Create(4).status(), cu::CurrentDeviceIndex().status()}) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_EQ(st.message().rfind(without, 0), 0u) << st.ToString();
  }
  EXPECT_NE(cu::DeviceBuffer::Allocate(16).status().message().find("16 bytes"), std::string::npos);
  EXPECT_EQ(cu::PointerKind(&x), cu::MemoryKind::kHost);
  EXPECT_EQ(cu::PointerKind(nullptr), cu::MemoryKind::kHost);
  EXPECT_FALSE(cu::SignalFlags::DriverHasThem());
}

// Device memory with a poisoned guard on each side of [off, off + bytes).
struct DeviceGuarded {
  cu::DeviceBuffer mem;
  size_t off, bytes;
  uint8_t* data() const { return static_cast<uint8_t*>(mem.get()) + kGuard + off; }
  static DeviceGuarded Make(size_t bytes, size_t off) {
    DeviceGuarded g{cu::DeviceBuffer(), off, bytes};
    auto m = cu::DeviceBuffer::Allocate(bytes + 2 * kGuard + 16);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    g.mem = std::move(m.value());
    EXPECT_TRUE(cu::Memset(g.mem.get(), kPoison, g.mem.bytes()).ok());
    return g;
  }
  std::vector<uint8_t> All() const {
    std::vector<uint8_t> h(mem.bytes());
    EXPECT_TRUE(cu::CopyToHost(h.data(), mem.get(), h.size()).ok());
    return h;
  }
  bool GuardsIntact() const {
    std::vector<uint8_t> h = All();
    for (size_t i = 0; i < h.size(); ++i) {
      if ((i < kGuard + off || i >= kGuard + off + bytes) && h[i] != kPoison) return false;
    }
    return true;
  }
};

std::vector<uint8_t> RandomBits(DataType t, size_t count, std::mt19937_64& rng) {
  std::vector<uint8_t> v(count * DataTypeSize(t));
  for (size_t i = 0; i < count; ++i) StoreBits(t, v.data(), i, RandomElement(t, rng));
  return v;
}

TEST(CudaReduce, TwoInputsEveryTypeOpLengthAndOffsetMatchTheFloat64Reference) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  for (DataType t : kAllDataTypes) {
    const size_t es = DataTypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : kLengths) {
        for (size_t off : {size_t{0}, es, 3 * es}) {  // element-aligned; the last two not 16-byte aligned
          const std::vector<uint8_t> ha = RandomBits(t, count, rng), hb = RandomBits(t, count, rng);
          DeviceGuarded a = DeviceGuarded::Make(ha.size(), off), b = DeviceGuarded::Make(hb.size(), 0),
                        d = DeviceGuarded::Make(ha.size(), off);
          ASSERT_TRUE(cu::CopyToDevice(a.data(), ha.data(), ha.size()).ok());
          ASSERT_TRUE(cu::CopyToDevice(b.data(), hb.data(), hb.size()).ok());
          ASSERT_TRUE(cu::Reduce(t, op, d.data(), a.data(), b.data(), count, nullptr).ok());
          ASSERT_TRUE(cu::Synchronize(nullptr).ok());
          std::vector<uint8_t> got(ha.size());
          ASSERT_TRUE(cu::CopyToHost(got.data(), d.data(), got.size()).ok());
          const std::string label = std::string(DataTypeName(t)) + " " + ReduceOpName(op) + " count " +
                                    std::to_string(count) + " offset " + std::to_string(off);
          ASSERT_TRUE(d.GuardsIntact()) << "write outside [0, count): " << label;
          for (size_t i = 0; i < count; ++i) {
            const uint64_t x = LoadBits(t, ha.data(), i), y = LoadBits(t, hb.data(), i);
            ASSERT_EQ(Mismatch(t, LoadBits(t, got.data(), i), RefBinary(t, op, x, y)), "") << label << " element " << i;
          }
        }
      }
    }
  }
}

// The N-input kernel goes 16 bytes at a time when every pointer is aligned (the
// allocations themselves, shift 0) and element by element otherwise (the last input
// one element in, shift 1); both against the CPU, bit for bit.
TEST(CudaReduce, NInputsAndAverageScalingMatchTheCpuKernelsBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  for (DataType t : kAllDataTypes) {
    const size_t es = DataTypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (int n : {1, 2, 3, 5, 16}) {
        for (size_t shift : {0, 1}) {
          const size_t count = 4099;
          std::vector<std::vector<uint8_t>> host;
          std::vector<cu::DeviceBuffer> dev;
          std::vector<const void*> hp, dp;
          for (int k = 0; k < n; ++k) {
            const size_t skip = k == n - 1 ? shift * es : 0;
            host.push_back(RandomBits(t, count + shift, rng));
            auto m = cu::DeviceBuffer::Allocate(host.back().size());
            ASSERT_TRUE(m.ok());
            ASSERT_TRUE(cu::CopyToDevice(m->get(), host.back().data(), host.back().size()).ok());
            dev.push_back(std::move(m.value()));
            hp.push_back(host.back().data() + skip);
            dp.push_back(static_cast<const char*>(dev.back().get()) + skip);
          }
          std::vector<uint8_t> want(count * es), got(count * es);
          ASSERT_TRUE(ReduceN(t, op, want.data(), hp.data(), n, count).ok());
          auto d = cu::DeviceBuffer::Allocate(got.size());
          ASSERT_TRUE(d.ok());
          ASSERT_TRUE(cu::ReduceN(t, op, d->get(), dp.data(), n, count, nullptr).ok());
          if (op == ReduceOp::kAvg) {
            ASSERT_TRUE(ScaleForAvg(t, want.data(), count, n).ok());
            ASSERT_TRUE(cu::ScaleForAvg(t, d->get(), count, n, nullptr).ok());
          }
          // ReduceNToAll: the same bits (AVG divided in the kernel) in each of three
          // outputs, the last one shifted like the last input.
          std::vector<cu::DeviceBuffer> outs;
          std::vector<void*> to;
          for (int j = 0; j < 3; ++j) {
            auto o = cu::DeviceBuffer::Allocate(got.size() + es);
            ASSERT_TRUE(o.ok());
            outs.push_back(std::move(o.value()));
            to.push_back(static_cast<char*>(outs.back().get()) + (j == 2 ? shift * es : 0));
          }
          ASSERT_TRUE(cu::ReduceNToAll(t, op, to.data(), 3, dp.data(), n, count, nullptr).ok());
          for (const void* from :
               {static_cast<const void*>(d->get()), static_cast<const void*>(to[0]), static_cast<const void*>(to[2])}) {
            ASSERT_TRUE(cu::CopyToHost(got.data(), from, got.size()).ok());
            for (size_t i = 0; i < count; ++i) {
              const uint64_t g = LoadBits(t, got.data(), i), w = LoadBits(t, want.data(), i);
              const bool both_nan = IsFloatType(t) && std::isnan(DecodeFloat(t, g)) && std::isnan(DecodeFloat(t, w));
              ASSERT_TRUE(g == w || both_nan)
                  << DataTypeName(t) << " " << ReduceOpName(op) << " n " << n << " shift " << shift << " element " << i
                  << (from == d->get() ? " (ReduceN)" : " (ReduceNToAll)") << ": got 0x" << std::hex << g << ", cpu 0x"
                  << w;
            }
          }
        }
      }
    }
  }
}

TEST(CudaReduce, HostMemoryAndBadArgumentsAreNamed) {
  SKIP_WITHOUT_GPU();
  std::vector<float> host(64);
  auto d = cu::DeviceBuffer::Allocate(host.size() * sizeof(float));
  ASSERT_TRUE(d.ok());
  Status st = cu::Reduce(DataType::kFloat32, ReduceOp::kSum, d->get(), host.data(), d->get(), 64, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a is ordinary host memory"), std::string::npos) << st.message();
  st = cu::Reduce(DataType::kFloat32, ReduceOp::kSum, nullptr, d->get(), d->get(), 64, nullptr);
  EXPECT_NE(st.message().find("dst is null"), std::string::npos) << st.message();
  st = cu::Reduce(static_cast<DataType>(99), ReduceOp::kSum, d->get(), d->get(), d->get(), 64, nullptr);
  EXPECT_NE(st.message().find("invalid DataType value 99"), std::string::npos) << st.message();
  const void* in[1] = {d->get()};
  st = cu::ReduceN(DataType::kFloat32, ReduceOp::kSum, d->get(), in, 17, 64, nullptr);
  EXPECT_NE(st.message().find("17 inputs"), std::string::npos) << st.message();
  void* to[1] = {d->get()};
  st = cu::ReduceNToAll(DataType::kFloat32, ReduceOp::kSum, to, 0, in, 1, 64, nullptr);
  EXPECT_NE(st.message().find("cuda::ReduceNToAll: 0 outputs"), std::string::npos) << st.message();
  void* host_to[1] = {host.data()};
  st = cu::ReduceNToAll(DataType::kFloat32, ReduceOp::kSum, host_to, 1, in, 1, 64, nullptr);
  EXPECT_NE(st.message().find("dst is ordinary host memory"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace chorus::kernels
