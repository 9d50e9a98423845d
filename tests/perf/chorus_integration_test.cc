// Runs chorus_perf with the chorus backend over loopback (ranks forked with torchrun's
// environment) for tiny sweeps of every collective, the dtypes and ops gloo and MPI lack
// (bfloat16, avg), both all_reduce algorithms, and checks that every line reports
// #wrong == 0 in both modes. Every run is bounded by a deadline; failures to set up must
// come back as messages, not hangs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/perf/launch.h"

namespace chorus {
namespace perf {
namespace {

using testing::DataRows;
using testing::ProcResult;

std::vector<ProcResult> RunChorus(const std::vector<std::string>& args, int nranks = 2,
                                  const std::map<std::string, std::string>& extra_env = {}) {
  testing::EnvMap env = {{"CHORUS_ALGO", ""}};
  for (const auto& kv : extra_env) env[kv.first] = kv.second;
  return testing::RunPerfRanks("chorus", args, nranks, env, std::chrono::seconds(60));
}

// Asserts a clean run and returns rank 0's output.
std::string ExpectCleanRun(const std::vector<std::string>& args, int nranks = 2,
                           const std::map<std::string, std::string>& extra_env = {}) {
  std::vector<ProcResult> r = RunChorus(args, nranks, extra_env);
  for (int rank = 0; rank < nranks; ++rank) {
    EXPECT_FALSE(r[rank].timed_out) << "rank " << rank << " timed out:\n" << r[rank].output;
    EXPECT_EQ(r[rank].exit_code, 0) << "rank " << rank << ":\n" << r[rank].output;
  }
  EXPECT_NE(r[0].output.find("# Avg bus bandwidth"), std::string::npos) << r[0].output;
  for (int rank = 1; rank < nranks; ++rank) {
    EXPECT_EQ(r[rank].output.find("# Avg bus bandwidth"), std::string::npos) << r[rank].output;
  }
  return r[0].output;
}

void ExpectNoWrong(const std::string& output, size_t expected_rows) {
  const auto rows = DataRows(output);
  ASSERT_EQ(rows.size(), expected_rows) << output;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 13u) << ::testing::PrintToString(row);
    EXPECT_EQ(row[8], "0") << "out-of-place #wrong in " << ::testing::PrintToString(row);
    EXPECT_EQ(row[12], "0") << "in-place #wrong in " << ::testing::PrintToString(row);
  }
}

TEST(ChorusAllReduceTest, DefaultSelectorSweepHasNoWrongElements) {
  // 8 B .. 1 MiB by 8: 8, 64, 512, 4K, 32K, 256K; crosses the line where the cost model
  // prefers the ring to recursive doubling (tens of KiB on shared memory, about 200 KiB
  // over TCP) and the striping threshold (256 KiB).
  const std::string out = ExpectCleanRun({"all_reduce", "-b", "8", "-e", "1M", "-f", "8", "-n", "3", "-w", "1"});
  ExpectNoWrong(out, 6);
  EXPECT_NE(out.find("backend: chorus  algo: auto (cost model)"), std::string::npos) << out;
  // The footer says what the selector picked at each size, and why: every prediction.
  EXPECT_NE(out.find("# all_reduce of 2 float32 (8 B) on 2 ranks: recursive_doubling (8 B on 1 host x 2 ranks"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("# all_reduce of 65536 float32 (262144 B) on 2 ranks: ring (262144 B on 1 host x 2 ranks"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("predicted: ring "), std::string::npos) << out;
  const auto rows = DataRows(out);
  if (!rows.empty()) {
    EXPECT_EQ(rows[0][0], "8");
    EXPECT_EQ(rows[0][1], "2");
    EXPECT_EQ(rows[0][2], "float");
    EXPECT_EQ(rows[0][3], "sum");
  }
}

class ChorusAlgoTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChorusAlgoTest, ForcedAlgorithmThroughFlagAndEnvironment) {
  const std::vector<std::string> sweep = {"all_reduce", "-b", "8", "-e", "256K", "-f", "8", "-n", "2", "-w", "1"};
  std::vector<std::string> with_flag = sweep;
  with_flag.insert(with_flag.end(), {"--algo", GetParam()});
  std::string out = ExpectCleanRun(with_flag);
  ExpectNoWrong(out, 6);
  EXPECT_NE(out.find("algo: " + GetParam()), std::string::npos) << out;
  // CHORUS_ALGO passes through when --algo is not given.
  out = ExpectCleanRun(sweep, 2, {{"CHORUS_ALGO", GetParam()}});
  ExpectNoWrong(out, 6);
  EXPECT_NE(out.find("algo: " + GetParam()), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Algos, ChorusAlgoTest, ::testing::Values("ring", "recursive_doubling"));

class ChorusCollectiveTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChorusCollectiveTest, SweepHasNoWrongElements) {
  ExpectNoWrong(ExpectCleanRun({GetParam(), "-b", "8", "-e", "64K", "-f", "16", "-n", "2", "-w", "1", "-r", "1"}), 4);
}

INSTANTIATE_TEST_SUITE_P(Collectives, ChorusCollectiveTest,
                         ::testing::Values("broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
                                           "sendrecv", "gather", "scatter"));

TEST(ChorusDtypeOpTest, TypesAndOpsTheBaselinesLack) {
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-d", "bf16", "-o", "sum", "-b", "64", "-e", "256K", "-f", "64"}), 3);
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-d", "float32", "-o", "avg", "-b", "64", "-e", "256K", "-f", "64"}), 3);
  ExpectNoWrong(ExpectCleanRun({"reduce_scatter", "-d", "half", "-o", "max", "-b", "64", "-e", "4K", "-f", "64"}), 2);
  ExpectNoWrong(ExpectCleanRun({"reduce", "-d", "int8", "-o", "prod", "-b", "64", "-e", "4K", "-f", "64"}), 2);
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-d", "int64", "-o", "min", "-b", "64", "-e", "4K", "-f", "64"}), 2);
}

TEST(ChorusWorldSizeTest, ThreeRanksNotAPowerOfTwo) {
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-b", "8", "-e", "256K", "-f", "32", "-n", "2", "-w", "1"}, 3), 4);
  ExpectNoWrong(ExpectCleanRun({"all_gather", "-b", "96", "-e", "96K", "-f", "32", "-n", "2", "-w", "1"}, 3), 3);
}

TEST(ChorusBarrierTest, OneLineWithoutCheck) {
  const auto rows = DataRows(ExpectCleanRun({"barrier", "-n", "5"}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0], "0");
  EXPECT_EQ(rows[0][8], "N/A");
}

TEST(ChorusErrorsTest, BadAlgoIsNamedOnEveryRank) {
  std::vector<ProcResult> r = RunChorus({"all_reduce", "--algo", "bogus", "-b", "8", "-e", "8", "--timeout", "10"});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(r[rank].timed_out);
    EXPECT_EQ(r[rank].exit_code, 1) << r[rank].output;
    EXPECT_NE(r[rank].output.find("bogus"), std::string::npos) << r[rank].output;
  }
}

TEST(ChorusErrorsTest, MissingPeerTimesOutWithAMessage) {
  // WORLD_SIZE=2 but only rank 0 starts: the rendezvous must give up within --timeout.
  const int port = testing::FreePort();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ProcResult> r = testing::RunAll(
      {{testing::ChorusPerfPath(), "--backend", "chorus", "--timeout", "2", "-b", "8", "-e", "8"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}}},
      std::chrono::seconds(30));
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_EQ(r[0].exit_code, 1) << r[0].output;
  EXPECT_NE(r[0].output.find("chorus init failed"), std::string::npos) << r[0].output;
  EXPECT_NE(r[0].output.find("rank 1"), std::string::npos) << r[0].output;  // names who is missing
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(ChorusErrorsTest, MissingEnvironmentIsNamed) {
  std::vector<ProcResult> r = testing::RunAll({{testing::ChorusPerfPath(), "--backend", "chorus"}},
                                              {{{"RANK", ""}, {"WORLD_SIZE", ""}}}, std::chrono::seconds(20));
  EXPECT_EQ(r[0].exit_code, 1);
  EXPECT_NE(r[0].output.find("needs RANK and WORLD_SIZE"), std::string::npos) << r[0].output;
}

}  // namespace
}  // namespace perf
}  // namespace chorus
