// End-to-end tests of the chorusrun binary: real processes, real signals. Every run
// is bounded by `timeout -s KILL` so that a launcher bug fails the test, never hangs it.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// Path of the binary under test (the test runs in its runfiles tree).
std::string Chorusrun() {
  std::string path = "tools/launcher/chorusrun";
  if (access(path.c_str(), X_OK) != 0) {
    const char* src = std::getenv("TEST_SRCDIR");
    if (src) path = std::string(src) + "/chorus/" + path;
  }
  return path;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

struct RunResult {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

// Runs a shell script in which $CHORUSRUN names the launcher; captures both streams.
RunResult RunShell(const std::string& script, int bound_s = 40) {
  static int counter = 0;
  std::string base = TmpDir() + "/run" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  std::string cmd = "CHORUSRUN=" + Quote(Chorusrun()) + " timeout -s KILL " + std::to_string(bound_s) + " /bin/sh -c " +
                    Quote(script) + " >" + base + ".out 2>" + base + ".err";
  auto start = std::chrono::steady_clock::now();
  int status = std::system(cmd.c_str());
  RunResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(base + ".out");
  r.err = ReadFile(base + ".err");
  return r;
}

// chorusrun <flags> -- /bin/sh -c <rank_script>
RunResult RunRanks(const std::string& flags, const std::string& rank_script, int bound_s = 40) {
  return RunShell("exec \"$CHORUSRUN\" " + flags + " -- /bin/sh -c " + Quote(rank_script), bound_s);
}

bool Contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(ChorusrunTest, SetsRankEnvironment) {
  RunResult r = RunRanks("--nproc-per-node 3",
                         "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
                         "$MASTER_PORT $CHORUS_LAUNCHER\"");
  ASSERT_EQ(r.code, 0) << r.err;
  std::regex line(R"(\[rank (\d)\] (\d) 3 (\d) 3 0 127\.0\.0\.1 (\d+) chorusrun)");
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  std::string port;
  int seen = 0;
  for (const std::string& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[1], m[2]);  // the prefix names the rank that printed
    EXPECT_EQ(m[2], m[3]);  // one node: RANK == LOCAL_RANK
    if (port.empty()) port = m[4];
    EXPECT_EQ(m[4], port) << "all ranks must share MASTER_PORT";
    seen |= 1 << std::stoi(m[1]);
  }
  EXPECT_EQ(seen, 7);
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_LE(std::stoi(port), 65535);
}

TEST(ChorusrunTest, MakesOneJobSecretForAllRanksUnlessOneIsSet) {
  RunResult r = RunRanks("--nproc-per-node 2", "echo \"secret=$CHORUS_SECRET\"");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  std::regex line(R"(\[rank \d\] secret=([0-9a-f]{64}))");
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_match(lines[0], m0, line)) << lines[0];
  ASSERT_TRUE(std::regex_match(lines[1], m1, line)) << lines[1];
  EXPECT_EQ(m0[1], m1[1]) << "the ranks of one job must share the secret";
  EXPECT_FALSE(Contains(r.out + r.err, "no job secret"));
  // The user's own secret is passed through untouched.
  RunResult mine = RunShell("CHORUS_SECRET=users-own exec \"$CHORUSRUN\" --nproc-per-node 1 -- /bin/sh -c " +
                                Quote("echo \"secret=$CHORUS_SECRET\""),
                            40);
  ASSERT_EQ(mine.code, 0) << mine.err;
  EXPECT_TRUE(Contains(mine.out, "secret=users-own")) << mine.out;
}

TEST(ChorusrunTest, MultiNodeRanksAndFixedPort) {
  RunResult r = RunRanks("--nnodes=2 --node_rank=1 --nproc_per_node=2 --master-addr 10.9.8.7",
                         "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR:$MASTER_PORT\"");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "[rank 2] 2 4 0 1 10.9.8.7:29500\n")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[rank 3] 3 4 1 1 10.9.8.7:29500\n")) << r.out;
}

TEST(ChorusrunTest, ExplicitPortAndOverriddenEnvironment) {
  // Values already in the environment are replaced, not duplicated.
  RunResult r = RunShell(
      "RANK=99 exec \"$CHORUSRUN\" --master-port=4321 -- /bin/sh -c 'echo $RANK $MASTER_PORT; "
      "env | grep -c ^RANK='");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] 0 4321\n[rank 0] 1\n");
}

TEST(ChorusrunTest, PrefixesBothStreamsAndPartialLines) {
  RunResult r = RunRanks("--nproc-per-node 2",
                         "printf 'a\\nx'; sleep 0.2; printf 'y\\nb'; printf 'e1\\ne' >&2; sleep 0.2; printf '2' >&2");
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = "[rank " + std::to_string(rank) + "] ";
    // "x" and "y" were written 0.2 s apart but form one line; "b" has no newline.
    EXPECT_TRUE(Contains(r.out, p + "a\n")) << r.out;
    EXPECT_TRUE(Contains(r.out, p + "xy\n")) << r.out;
    EXPECT_TRUE(Contains(r.out, p + "b\n")) << r.out;
    EXPECT_TRUE(Contains(r.err, p + "e1\n")) << r.err;
    EXPECT_TRUE(Contains(r.err, p + "e2\n")) << r.err;
    EXPECT_FALSE(Contains(r.out, p + "e1")) << "stderr must stay on stderr";
  }
  EXPECT_EQ(Lines(r.out).size(), 6u) << r.out;
}

TEST(ChorusrunTest, ConcurrentLongLinesNeverInterleave) {
  // Four ranks write 300 lines of ~600 bytes each as fast as they can, each line in
  // several write() calls (printf of pieces): every output line must be one rank's.
  RunResult r = RunRanks("--nproc-per-node 4",
                         "pad=$(printf '%0300d' 0); i=0; while [ $i -lt 300 ]; do printf 'r%s ' $RANK; "
                         "printf '%s' $pad; printf '%s' $pad; printf ' r%s\\n' $RANK; i=$((i+1)); done");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 1200u);
  std::regex line(R"(\[rank (\d)\] r(\d) 0{600} r(\d))");
  for (const std::string& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l.substr(0, 80);
    ASSERT_EQ(m[1], m[2]);
    ASSERT_EQ(m[1], m[3]);
  }
}

TEST(ChorusrunTest, FailingRankStopsTheOthers) {
  RunResult r = RunRanks("--nproc-per-node 3", "if [ $RANK = 1 ]; then sleep 0.3; exit 7; fi; exec sleep 60");
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(chorusrun: rank 1 \(pid \d+\) exited with code 7\n)"))) << r.err;
  EXPECT_TRUE(Contains(r.err, "rank 0 (pid ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "killed by signal SIGTERM (stopped by chorusrun)")) << r.err;
  EXPECT_LT(r.seconds, 5.0) << "SIGTERM should stop `sleep` at once";
}

TEST(ChorusrunTest, RanksIgnoringSigtermAreKilledAfterGrace) {
  // Rank 0 fails only once rank 1 ignores SIGTERM (the file says so).
  std::string flag = TmpDir() + "/ign" + std::to_string(getpid());
  RunResult r = RunRanks("--nproc-per-node 2 --kill-grace 1", "if [ $RANK = 0 ]; then while [ ! -e " + flag +
                                                                  " ]; do sleep 0.05; done; exit 3; fi; "
                                                                  "trap '' TERM; touch " +
                                                                  flag + "; sleep 60");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(Contains(r.err, "rank 1 (pid ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "killed by signal SIGKILL (stopped by chorusrun)")) << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(ChorusrunTest, RankKilledBySignal) {
  RunResult r = RunRanks("--nproc-per-node 2", "if [ $RANK = 1 ]; then kill -SEGV $$; fi; exec sleep 60");
  EXPECT_EQ(r.code, 128 + SIGSEGV) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(chorusrun: rank 1 \(pid \d+\) killed by signal SIGSEGV\n)")))
      << r.err;
  EXPECT_LT(r.seconds, 5.0);
}

TEST(ChorusrunTest, TimeoutNamesTheRanksStillRunning) {
  RunResult r = RunRanks("--nproc-per-node 3 --timeout 1", "if [ $RANK = 1 ]; then exit 0; fi; exec sleep 60");
  EXPECT_EQ(r.code, 124) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(timeout after 1 s; ranks still running:(.*)\n)"))) << r.err;
  EXPECT_TRUE(Contains(m[1], " 0 (pid ")) << m[1];
  EXPECT_TRUE(Contains(m[1], " 2 (pid ")) << m[1];
  EXPECT_FALSE(Contains(m[1], " 1 (pid ")) << "rank 1 had finished: " << m[1];
  EXPECT_GE(r.seconds, 1.0);
  EXPECT_LT(r.seconds, 5.0);
}

TEST(ChorusrunTest, AllSucceedExitsZero) {
  RunResult r = RunRanks("--nproc-per-node 4", "exit 0");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(ChorusrunTest, BadArgumentsGiveUsageErrors) {
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--nproc-per-node abc -- true", "--nproc-per-node: 'abc'"},
           {"--frobnicate -- true", "unknown flag '--frobnicate'"},
           {"--nnodes 2 --node-rank 5 -- true", "--node-rank: 5"},
           {"--timeout=-3 -- true", "--timeout: '-3'"},
           {"--nproc-per-node 2", "no program given"},
       }) {
    RunResult r = RunShell("exec \"$CHORUSRUN\" " + c.args);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_TRUE(Contains(r.err, "chorusrun: " + c.needle)) << r.err;
    EXPECT_TRUE(Contains(r.err, "usage: chorusrun")) << r.err;
  }
}

TEST(ChorusrunTest, MissingProgramIsReported) {
  RunResult r = RunShell("exec \"$CHORUSRUN\" -- /nonexistent/prog");
  EXPECT_EQ(r.code, 127);
  EXPECT_TRUE(Contains(r.err, "[rank 0] chorusrun: cannot run '/nonexistent/prog': No such file")) << r.err;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(ChorusrunTest, NoZombiesOrOrphansAfterFailure) {
  // Each rank leaves a grandchild (which also holds the output pipe); rank 1 fails.
  std::string dir = TmpDir() + "/gc" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  RunResult r = RunRanks("--nproc-per-node 2", "sleep 300 & echo $! > " + dir +
                                                   "/$RANK; if [ $RANK = 1 ]; then "
                                                   "while [ ! -s " +
                                                   dir + "/0 ]; do sleep 0.05; done; exit 5; fi; wait");
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_LT(r.seconds, 5.0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t gc = std::stoi(ReadFile(dir + "/" + std::to_string(rank)));
    // chorusrun is a subreaper: it must have killed *and* reaped them (no zombie left).
    EXPECT_FALSE(Alive(gc)) << "grandchild of rank " << rank << " pid " << gc << " survived";
  }
}

TEST(ChorusrunTest, SuccessfulRankLeavingBackgroundChildDoesNotHang) {
  std::string dir = TmpDir() + "/bg" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  RunResult r = RunRanks("", "sleep 300 & echo $! > " + dir + "/pid; echo done");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] done\n");
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_FALSE(Alive(std::stoi(ReadFile(dir + "/pid"))));
}

TEST(ChorusrunTest, ForwardsSigint) {
  // The ranks trap SIGINT and report it; chorusrun exits 128+SIGINT.
  // Each rank touches a file once its trap is set; SIGINT is sent when both exist.
  std::string dir = TmpDir() + "/int" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  RunResult r = RunShell(
      "\"$CHORUSRUN\" --nproc-per-node 2 -- /bin/sh -c "
      "'trap \"echo got INT; exit 3\" INT; touch " +
      dir +
      "/$RANK; while :; do sleep 0.05; done' & p=$!; "
      "while [ ! -e " +
      dir + "/0 ] || [ ! -e " + dir + "/1 ]; do sleep 0.05; done; kill -INT $p; wait $p");
  EXPECT_EQ(r.code, 128 + SIGINT) << r.err;
  EXPECT_TRUE(Contains(r.out, "[rank 0] got INT\n")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[rank 1] got INT\n")) << r.out;
  EXPECT_TRUE(Contains(r.err, "received SIGINT, forwarding it to the ranks")) << r.err;
}

TEST(ChorusrunTest, TeeDirKeepsRawOutput) {
  std::string dir = TmpDir() + "/tee" + std::to_string(getpid()) + "/nested";
  RunResult r = RunRanks("--nproc-per-node 2 --tee-dir " + dir, "echo out$RANK; echo err$RANK >&2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir + "/rank_0.stdout"), "out0\n");
  EXPECT_EQ(ReadFile(dir + "/rank_1.stdout"), "out1\n");
  EXPECT_EQ(ReadFile(dir + "/rank_1.stderr"), "err1\n");
}

}  // namespace
