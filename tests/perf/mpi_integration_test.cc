// Runs chorus_perf with the MPI backend on 2 ranks through mpirun (loopback TCP) for a
// tiny sweep and checks #wrong == 0. Skipped, with the reason, when mpirun is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/perf/launch.h"

namespace chorus {
namespace perf {
namespace {

bool HaveMpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

std::vector<testing::ProcResult> RunMpi(const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"mpirun",
                                  "--allow-run-as-root",
                                  "--oversubscribe",
                                  "-np",
                                  "2",
                                  "--mca",
                                  "btl",
                                  "tcp,self",
                                  "--mca",
                                  "btl_tcp_if_include",
                                  "lo",
                                  "--mca",
                                  "oob_tcp_if_include",
                                  "lo",
                                  testing::ChorusPerfPath(),
                                  "--backend",
                                  "mpi"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::map<std::string, std::string> env;
  if (tmp) env["TMPDIR"] = tmp;  // Open MPI's session directory
  return testing::RunAll({cmd}, {env}, std::chrono::seconds(90));
}

TEST(MpiIntegrationTest, AllReduceAndFriendsHaveNoWrongElements) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"all_reduce", "-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1"},
           {"reduce_scatter", "-b", "8", "-e", "64K", "-f", "16", "-n", "2", "-w", "1"},
           {"all_gather", "-d", "int32", "-b", "8", "-e", "64K", "-f", "16", "-n", "2", "-w", "1"},
           {"scatter", "-r", "1", "-b", "8", "-e", "64K", "-f", "16", "-n", "2", "-w", "1"},
       }) {
    std::vector<testing::ProcResult> r = RunMpi(args);
    ASSERT_FALSE(r[0].timed_out) << r[0].output;
    ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
    auto rows = testing::DataRows(r[0].output);
    ASSERT_GE(rows.size(), 4u) << r[0].output;
    for (const auto& row : rows) {
      ASSERT_EQ(row.size(), 13u) << ::testing::PrintToString(row);
      EXPECT_EQ(row[8], "0") << ::testing::PrintToString(row);
      EXPECT_EQ(row[12], "0") << ::testing::PrintToString(row);
    }
    EXPECT_NE(r[0].output.find("# backend: mpi"), std::string::npos) << r[0].output;
  }
}

TEST(MpiIntegrationTest, HalfIsRefusedClearly) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)";
  std::vector<testing::ProcResult> r = RunMpi({"all_reduce", "-d", "half", "-b", "8", "-e", "8"});
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_NE(r[0].exit_code, 0);
  EXPECT_NE(r[0].output.find("plain MPI has no float16"), std::string::npos) << r[0].output;
}

}  // namespace
}  // namespace perf
}  // namespace chorus
