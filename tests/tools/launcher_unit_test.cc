// Unit tests of chorusrun's argument parsing and output line prefixing.
#include <gtest/gtest.h>

#include "tools/launcher/line_prefixer.h"
#include "tools/launcher/options.h"
#include "tools/launcher/spawn.h"

namespace chorus::launcher {
namespace {

Result<LaunchOptions> Parse(std::vector<std::string> args) { return ParseLaunchArgs(args); }

TEST(LaunchOptionsTest, Defaults) {
  auto o = Parse({"--", "prog", "--nnodes", "7"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->nproc_per_node, 1);
  EXPECT_EQ(o->nnodes, 1);
  EXPECT_EQ(o->node_rank, 0);
  EXPECT_EQ(o->master_addr, "127.0.0.1");
  EXPECT_EQ(o->master_port, 0);  // single node: chorusrun picks a free port
  EXPECT_EQ(o->timeout_s, 0);
  // Everything after "--" belongs to the program, flags included.
  EXPECT_EQ(o->program, (std::vector<std::string>{"prog", "--nnodes", "7"}));
}

TEST(LaunchOptionsTest, AllSpellings) {
  auto o = Parse({"--nproc_per_node=4", "--nnodes", "3", "--node-rank=2", "--master_addr", "10.0.0.1",
                  "--master-port=1234", "--timeout", "2.5", "--tee_dir=/tmp/x", "--kill-grace", "1", "prog"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->nproc_per_node, 4);
  EXPECT_EQ(o->nnodes, 3);
  EXPECT_EQ(o->node_rank, 2);
  EXPECT_EQ(o->master_addr, "10.0.0.1");
  EXPECT_EQ(o->master_port, 1234);
  EXPECT_DOUBLE_EQ(o->timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(o->kill_grace_s, 1);
  EXPECT_EQ(o->tee_dir, "/tmp/x");
  EXPECT_EQ(o->program, (std::vector<std::string>{"prog"}));
}

TEST(LaunchOptionsTest, MultiNodeDefaultsToFixedPort) {
  auto o = Parse({"--nnodes", "2", "--", "prog"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->master_port, kDefaultMultiNodePort);
}

TEST(LaunchOptionsTest, Help) {
  auto o = Parse({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

void ExpectError(std::vector<std::string> args, const std::string& needle) {
  auto o = Parse(args);
  ASSERT_FALSE(o.ok()) << "accepted: " << ::testing::PrintToString(args);
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find(needle), std::string::npos) << o.status().message();
}

TEST(LaunchOptionsTest, ErrorsNameTheFlagAndValue) {
  ExpectError({"--bogus", "1", "--", "p"}, "unknown flag '--bogus'");
  ExpectError({"--bogus=1", "p"}, "unknown flag '--bogus'");
  ExpectError({"--nproc-per-node", "abc", "p"}, "--nproc-per-node: 'abc'");
  ExpectError({"--nproc_per_node=0", "p"}, "--nproc_per_node: '0'");
  ExpectError({"--nnodes", "-1", "p"}, "--nnodes: '-1'");
  ExpectError({"--master-port", "70000", "p"}, "--master-port: '70000'");
  ExpectError({"--master-port", "12x", "p"}, "--master-port: '12x'");
  ExpectError({"--timeout", "0", "p"}, "--timeout: '0'");
  ExpectError({"--timeout", "soon", "p"}, "--timeout: 'soon'");
  ExpectError({"--master-addr=", "p"}, "--master-addr: empty");
  ExpectError({"--nnodes", "2", "--node-rank", "2", "p"}, "--node-rank: 2 must be below --nnodes 2");
  ExpectError({"--nnodes"}, "--nnodes: missing value");
  ExpectError({"--nnodes", "2"}, "no program given");
  ExpectError({"--"}, "no program given");
}

TEST(RankEnvironmentTest, SetsLauncherVariablesAndKeepsTheRest) {
  auto o = Parse({"--nnodes", "3", "--node-rank", "2", "--nproc-per-node", "4", "--master-addr", "h0", "p"});
  ASSERT_TRUE(o.ok());
  const char* inherited[] = {"PATH=/bin", "RANK=77", "WORLD_SIZE=1", "X=a=b", nullptr};
  std::vector<std::string> env = RankEnvironment(*o, 9, 1, const_cast<char* const*>(inherited));
  std::vector<std::string> want = {
      "PATH=/bin",     "X=a=b",        "MASTER_ADDR=h0",     "MASTER_PORT=29500", "RANK=9",
      "WORLD_SIZE=12", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=2",      "CHORUS_LAUNCHER=chorusrun"};
  EXPECT_EQ(env, want);
  // A secret made by chorusrun goes to every rank.
  o->job_secret = "abc";
  env = RankEnvironment(*o, 9, 1, const_cast<char* const*>(inherited));
  EXPECT_EQ(env.back(), "CHORUS_SECRET=abc");
}

TEST(LinePrefixerTest, WholeLines) {
  LinePrefixer p("[rank 1] ");
  EXPECT_EQ(p.Feed("a\nbc\n", 5), "[rank 1] a\n[rank 1] bc\n");
  EXPECT_FALSE(p.has_partial());
  EXPECT_EQ(p.Flush(), "");
}

TEST(LinePrefixerTest, PartialLinesAreHeldUntilComplete) {
  LinePrefixer p("[r] ");
  EXPECT_EQ(p.Feed("he", 2), "");
  EXPECT_EQ(p.Feed("llo", 3), "");
  EXPECT_TRUE(p.has_partial());
  EXPECT_EQ(p.Feed(" world\nnext", 11), "[r] hello world\n");
  EXPECT_EQ(p.Flush(), "[r] next\n");  // end of stream: the partial line gets its prefix and a newline
  EXPECT_EQ(p.Flush(), "");
}

TEST(LinePrefixerTest, EmptyLinesKeepTheirPrefix) {
  LinePrefixer p("> ");
  EXPECT_EQ(p.Feed("\n\n", 2), "> \n> \n");
}

TEST(LinePrefixerTest, OverlongLinesAreCut) {
  LinePrefixer p("> ", 4);
  EXPECT_EQ(p.Feed("abcdefgh", 8), "> abcdefgh\n");  // cut once the buffer reaches the cap
  EXPECT_EQ(p.Feed("ab", 2), "");
  EXPECT_EQ(p.Feed("cd\n", 3), "> abcd\n");
}

}  // namespace
}  // namespace chorus::launcher
