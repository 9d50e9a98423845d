// Runs chorus_perf with the gloo backend on 2 ranks over loopback (two processes,
// torchrun-style environment) for tiny sweeps and checks that every line reports
// #wrong == 0 in both modes. Each run is bounded by a deadline.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/perf/launch.h"

namespace chorus {
namespace perf {
namespace {

using testing::DataRows;
using testing::ProcResult;

std::vector<ProcResult> RunGloo(const std::vector<std::string>& args) {
  const int port = testing::FreePort();
  std::vector<std::vector<std::string>> cmds;
  std::vector<std::map<std::string, std::string>> envs;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> cmd = {testing::ChorusPerfPath(), "--backend", "gloo", "--timeout", "30"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    cmds.push_back(cmd);
    envs.push_back({{"RANK", std::to_string(rank)},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)}});
  }
  return testing::RunAll(cmds, envs, std::chrono::seconds(60));
}

// Asserts a clean run and returns rank 0's table rows.
std::vector<std::vector<std::string>> ExpectCleanRun(const std::vector<std::string>& args) {
  std::vector<ProcResult> r = RunGloo(args);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(r[rank].timed_out) << "rank " << rank << " timed out:\n" << r[rank].output;
    EXPECT_EQ(r[rank].exit_code, 0) << "rank " << rank << ":\n" << r[rank].output;
  }
  EXPECT_NE(r[0].output.find("# Avg bus bandwidth"), std::string::npos) << r[0].output;
  // Only rank 0 prints the table.
  EXPECT_EQ(r[1].output.find("# Avg bus bandwidth"), std::string::npos) << r[1].output;
  return DataRows(r[0].output);
}

void ExpectNoWrong(const std::vector<std::vector<std::string>>& rows, size_t expected_rows) {
  ASSERT_EQ(rows.size(), expected_rows);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 13u) << ::testing::PrintToString(row);
    EXPECT_EQ(row[8], "0") << "out-of-place #wrong in " << ::testing::PrintToString(row);
    EXPECT_EQ(row[12], "0") << "in-place #wrong in " << ::testing::PrintToString(row);
  }
}

class GlooAllReduceAlgoTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GlooAllReduceAlgoTest, SweepHasNoWrongElements) {
  // 8 B .. 256 KiB by 8: 8, 64, 512, 4K, 32K, 256K.
  auto rows =
      ExpectCleanRun({"all_reduce", "--algo", GetParam(), "-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1"});
  ExpectNoWrong(rows, 6);
  if (!rows.empty()) {
    EXPECT_EQ(rows[0][0], "8");
    EXPECT_EQ(rows[0][1], "2");
    EXPECT_EQ(rows[0][2], "float");
    EXPECT_EQ(rows[0][3], "sum");
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, GlooAllReduceAlgoTest,
                         ::testing::Values("ring", "ring_chunked", "halving_doubling", "bcube", "ring_legacy"));

class GlooCollectiveTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GlooCollectiveTest, SweepHasNoWrongElements) {
  ExpectNoWrong(ExpectCleanRun({GetParam(), "-b", "8", "-e", "64K", "-f", "16", "-n", "2", "-w", "1", "-r", "1"}), 4);
}

INSTANTIATE_TEST_SUITE_P(Collectives, GlooCollectiveTest,
                         ::testing::Values("broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
                                           "sendrecv", "gather", "scatter"));

TEST(GlooDtypeOpTest, OtherTypesAndOps) {
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-d", "half", "-o", "max", "-b", "64", "-e", "4K", "-f", "64"}), 2);
  ExpectNoWrong(ExpectCleanRun({"reduce_scatter", "-d", "int8", "-o", "prod", "-b", "64", "-e", "4K", "-f", "64"}), 2);
  ExpectNoWrong(ExpectCleanRun({"all_reduce", "-d", "int64", "-o", "min", "-b", "64", "-e", "4K", "-f", "64"}), 2);
}

TEST(GlooBarrierTest, OneLineWithoutCheck) {
  auto rows = ExpectCleanRun({"barrier", "-n", "5"});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0], "0");
  EXPECT_EQ(rows[0][8], "N/A");
}

TEST(GlooErrorsTest, UnsupportedDtypeFailsOnEveryRankWithoutHanging) {
  std::vector<ProcResult> r = RunGloo({"all_reduce", "-d", "bf16", "-b", "8", "-e", "8"});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(r[rank].timed_out);
    EXPECT_EQ(r[rank].exit_code, 1) << r[rank].output;
    EXPECT_NE(r[rank].output.find("gloo has no bfloat16"), std::string::npos) << r[rank].output;
  }
  r = RunGloo({"all_reduce", "-o", "avg", "-b", "8", "-e", "8"});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r[rank].exit_code, 1) << r[rank].output;
    EXPECT_NE(r[rank].output.find("no avg"), std::string::npos) << r[rank].output;
  }
}

TEST(GlooErrorsTest, MissingEnvironmentIsNamed) {
  std::vector<ProcResult> r = testing::RunAll({{testing::ChorusPerfPath(), "--backend", "gloo"}},
                                              {{{"RANK", ""}, {"WORLD_SIZE", ""}}}, std::chrono::seconds(20));
  EXPECT_EQ(r[0].exit_code, 1);
  EXPECT_NE(r[0].output.find("needs RANK and WORLD_SIZE"), std::string::npos) << r[0].output;
}

TEST(GlooErrorsTest, MissingPeerTimesOutWithAMessage) {
  // WORLD_SIZE=2 but only rank 0 starts: the rendezvous must give up, not hang.
  const int port = testing::FreePort();
  std::vector<ProcResult> r = testing::RunAll(
      {{testing::ChorusPerfPath(), "--backend", "gloo", "--timeout", "2", "-b", "8", "-e", "8"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}}},
      std::chrono::seconds(30));
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_EQ(r[0].exit_code, 1) << r[0].output;
  EXPECT_NE(r[0].output.find("init failed"), std::string::npos) << r[0].output;
}

}  // namespace
}  // namespace perf
}  // namespace chorus
