// chorus_perf's device-buffer paths: --device and --backend nccl. Here (no GPU, no
// NCCL) they must refuse with a clear message and no hang; on a machine with a GPU the
// chorus --device sweep runs and checks its results (#wrong 0), and NCCL runs where
// libnccl.so.2 can be loaded (tools/gpu/gpu_check.sh carries this test there).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/reduce_cuda.h"
#include "tests/perf/launch.h"
#include "tools/perf/nccl_lib.h"
#include "tools/perf/options.h"

namespace chorus {
namespace perf {
namespace {

using testing::DataRows;
using testing::ProcResult;

// Two ranks on one GPU: NCCL accepts them with a host id each (its socket transport).
testing::EnvMap HostId(int rank) { return {{"NCCL_HOSTID", "chorus_perf_test_" + std::to_string(rank)}}; }

std::vector<ProcResult> RunPerf(const std::string& backend, const std::vector<std::string>& args, int nranks) {
  return testing::RunPerfRanks(backend, args, nranks, {}, std::chrono::seconds(90), HostId);
}

bool HaveGpu() { return kernels::cuda::DeviceStatus().ok(); }

void ExpectAllChecked(const ProcResult& r0) {
  const auto rows = DataRows(r0.output);
  ASSERT_FALSE(rows.empty()) << r0.output;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 13u) << r0.output;
    EXPECT_EQ(row[8], "0") << "out-of-place #wrong\n" << r0.output;
    EXPECT_EQ(row[12], "0") << "in-place #wrong\n" << r0.output;
  }
}

TEST(DeviceFlagsTest, DeviceNcclLibAndBackendNcclParse) {
  Result<PerfOptions> o = ParseFlags({"--backend", "nccl", "--device", "--nccl-lib", "/opt/nccl/libnccl.so.2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->backend, "nccl");
  EXPECT_TRUE(o->device);
  EXPECT_EQ(o->nccl_lib, "/opt/nccl/libnccl.so.2");
  EXPECT_FALSE(ParseFlags({})->device);
  EXPECT_FALSE(o->blocking);  // device calls in stream order unless asked
  EXPECT_TRUE(ParseFlags({"--device", "--blocking"})->blocking);
}

TEST(NcclLibTest, AMissingLibraryIsNamedWithTheWayOut) {
  Result<std::unique_ptr<NcclLib>> lib = NcclLib::Load("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("NCCL not found"), std::string::npos) << lib.status().message();
  EXPECT_NE(lib.status().message().find("/nonexistent/libnccl.so.2"), std::string::npos);
  EXPECT_NE(lib.status().message().find("--nccl-lib"), std::string::npos);
}

// Where NCCL is installed (even without a GPU, as CUDA's toolkit here), every entry point
// resolves and the version reads back.
TEST(NcclLibTest, TheInstalledLibraryLoadsWithEveryEntryPoint) {
  Result<std::unique_ptr<NcclLib>> lib = NcclLib::Load("");
  if (!lib.ok()) GTEST_SKIP() << lib.status().message();
  const std::string v = lib.value()->version();
  EXPECT_EQ(v.rfind("2.", 0), 0u) << v;
}

TEST(NcclLibTest, TypesAndOpsMapToNcclsEnums) {
  int v = -1;
  ASSERT_TRUE(NcclDataType(DataType::kFloat32, &v));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(NcclDataType(DataType::kBFloat16, &v));
  EXPECT_EQ(v, 9);
  ASSERT_TRUE(NcclDataType(DataType::kInt64, &v));
  EXPECT_EQ(v, 4);
  ASSERT_TRUE(NcclRedOp(ReduceOp::kMin, &v));
  EXPECT_EQ(v, 3);
  ASSERT_TRUE(NcclRedOp(ReduceOp::kAvg, &v));
  EXPECT_EQ(v, 4);
}

TEST(DeviceRunTest, HostOnlyBackendsRefuseDeviceBuffers) {
  std::vector<ProcResult> r = RunPerf("gloo", {"--device", "-b", "8", "-e", "8"}, 1);
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_EQ(r[0].exit_code, 1) << r[0].output;
  EXPECT_NE(r[0].output.find("--device: backend gloo takes host buffers only"), std::string::npos) << r[0].output;
}

TEST(DeviceRunTest, ChorusOnDeviceBuffersChecksItsResults) {
  // --timeout 30: a stuck call ends the ranks with its message well inside 90 s.
  std::vector<ProcResult> r =
      RunPerf("chorus", {"--device", "--timeout", "30", "-b", "8", "-e", "1M", "-f", "16", "-n", "3"}, 2);
  if (!HaveGpu()) {
    for (const ProcResult& p : r) {
      EXPECT_FALSE(p.timed_out);
      EXPECT_EQ(p.exit_code, 1) << p.output;
      EXPECT_NE(p.output.find("no CUDA device"), std::string::npos) << p.output;
    }
    GTEST_SKIP() << "no GPU here: only the refusal was checked";
  }
  for (const ProcResult& p : r) EXPECT_EQ(p.exit_code, 0) << p.output;
  ExpectAllChecked(r[0]);
}

// Stream order (the default: calls enqueued, one wait a loop) and --blocking, on the
// collectives whose chorus_perf paths differ: broadcast's root copies on the stream
// first; reduce_scatter and gather read through the stream forms too.
TEST(DeviceRunTest, ChorusDeviceCallsInStreamOrderAndBlockingCheckTheirResults) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here (the refusal without one is checked above)";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"broadcast", "--root", "1"},
                                               {"reduce_scatter"},
                                               {"gather"},
                                               {"all_reduce", "--blocking"}}) {
    std::vector<std::string> sweep = args;
    for (const char* a : {"--device", "--timeout", "30", "-b", "4K", "-e", "4M", "-f", "32", "-n", "4", "-w", "2"}) {
      sweep.push_back(a);
    }
    std::vector<ProcResult> r = RunPerf("chorus", sweep, 2);
    for (const ProcResult& p : r) EXPECT_EQ(p.exit_code, 0) << args[0] << "\n" << p.output;
    ExpectAllChecked(r[0]);
    const bool blocking = args.back() == "--blocking";
    EXPECT_NE(r[0].output.find(blocking ? "each call waited for" : "calls enqueued in stream order"), std::string::npos)
        << r[0].output;
  }
}

TEST(DeviceRunTest, NcclSweepChecksItsResultsOrSaysWhyNot) {
  // --timeout 30: a rank whose peer failed (NCCL init refused one of them, say) ends
  // with a message well inside the launcher's 90 s, instead of waiting in NCCL.
  std::vector<ProcResult> r = RunPerf("nccl", {"--timeout", "30", "-b", "8", "-e", "1M", "-f", "16", "-n", "3"}, 2);
  for (const ProcResult& p : r) EXPECT_FALSE(p.timed_out) << p.output;
  if (!HaveGpu()) {
    EXPECT_EQ(r[0].exit_code, 1) << r[0].output;
    EXPECT_NE(r[0].output.find("no CUDA device"), std::string::npos) << r[0].output;
    GTEST_SKIP() << "no GPU here: only the refusal was checked";
  }
  if (r[0].output.find("NCCL not found") != std::string::npos) {
    GTEST_SKIP() << "GPU but no NCCL: " << r[0].output;
  }
  for (const ProcResult& p : r) EXPECT_EQ(p.exit_code, 0) << p.output;
  ExpectAllChecked(r[0]);
}

}  // namespace
}  // namespace perf
}  // namespace chorus
