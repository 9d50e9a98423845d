// Unit tests for the pure parts of chorus_perf: flags, size sweep, bus-bandwidth
// factors, buffer shapes, the expected-value generator and the table formatting.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tools/perf/collectives.h"
#include "tools/perf/options.h"
#include "tools/perf/pattern.h"
#include "tools/perf/report.h"
#include "tools/perf/watchdog.h"

namespace chorus {
namespace perf {
namespace {

Result<PerfOptions> Parse(std::vector<std::string> args) { return ParseFlags(args); }

// Runs `body` in a child whose stderr goes to a pipe; returns (exit status, stderr).
template <typename F>
std::pair<int, std::string> InChild(F body) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, err};
}

TEST(WatchdogTest, ACallOutlivingItsLimitEndsTheProcessNamingIt) {
  auto [code, err] = InChild([] {
    Watchdog dog("rank 1");
    Armed guard(dog, "ncclCommInitRank", std::chrono::milliseconds(1000));
    std::this_thread::sleep_for(std::chrono::seconds(20));  // the hang (the child never gets past it)
  });
  EXPECT_EQ(code, 1) << err;
  EXPECT_NE(err.find("rank 1: ncclCommInitRank did not return within 1 s"), std::string::npos) << err;
}

TEST(WatchdogTest, CallsThatReturnInTimeAreLeftAlone) {
  auto [code, err] = InChild([] {
    Watchdog dog("rank 0");
    for (int i = 0; i < 3; ++i) {
      Armed guard(dog, "nccl AllReduce", std::chrono::milliseconds(300));
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // disarmed: nothing fires
  });
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(err, "");
}

TEST(FlagsTest, DefaultsMatchNcclTestsHabits) {
  Result<PerfOptions> o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->coll, Collective::kAllReduce);
  EXPECT_EQ(o->backend, "chorus");
  EXPECT_EQ(o->iters, 20);
  EXPECT_EQ(o->warmup_iters, 5);
  EXPECT_TRUE(o->check);
  EXPECT_EQ(o->dtype, DataType::kFloat32);
  EXPECT_EQ(o->op, ReduceOp::kSum);
}

TEST(FlagsTest, ShortLongAndEqualsForms) {
  Result<PerfOptions> o = Parse({"reduce_scatter",
                                 "-b",
                                 "1K",
                                 "--maxbytes=4M",
                                 "-f4",
                                 "-n",
                                 "7",
                                 "--warmup_iters",
                                 "0",
                                 "-c",
                                 "0",
                                 "-d",
                                 "half",
                                 "-o",
                                 "max",
                                 "-r",
                                 "1",
                                 "--backend",
                                 "mpi",
                                 "--algo",
                                 "x",
                                 "--csv",
                                 "/tmp/a.csv",
                                 "--json=/tmp/a.json",
                                 "--progress",
                                 "--timeout",
                                 "9"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->coll, Collective::kReduceScatter);
  EXPECT_EQ(o->min_bytes, 1024);
  EXPECT_EQ(o->max_bytes, 4 << 20);
  EXPECT_EQ(o->step_factor, 4);
  EXPECT_EQ(o->iters, 7);
  EXPECT_EQ(o->warmup_iters, 0);
  EXPECT_FALSE(o->check);
  EXPECT_EQ(o->dtype, DataType::kFloat16);
  EXPECT_EQ(o->op, ReduceOp::kMax);
  EXPECT_EQ(o->root, 1);
  EXPECT_EQ(o->backend, "mpi");
  EXPECT_EQ(o->algo, "x");
  EXPECT_EQ(o->csv_path, "/tmp/a.csv");
  EXPECT_EQ(o->json_path, "/tmp/a.json");
  EXPECT_TRUE(o->progress);
  EXPECT_EQ(o->timeout_s, 9);
}

TEST(FlagsTest, CollectiveByFlagOrAlias) {
  EXPECT_EQ(Parse({"--coll", "alltoall"})->coll, Collective::kAllToAll);
  EXPECT_EQ(Parse({"--op_name", "all_gather"})->coll, Collective::kAllGather);
  EXPECT_EQ(Parse({"--coll=sendrecv"})->coll, Collective::kSendRecv);
}

// Each bad value must fail with a message naming the flag or the value.
TEST(FlagsTest, BadValuesAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"-b", "abc"}, "abc"},
      {{"-e", "4X"}, "suffix"},
      {{"-b", "2M", "-e", "1M"}, "larger than --maxbytes"},
      {{"-n", "0"}, "--iters"},
      {{"-n", "ten"}, "--iters"},
      {{"-w", "-1"}, "--warmup_iters"},
      {{"-c", "2"}, "--check expects 0 or 1"},
      {{"-f", "1"}, "--stepfactor"},
      {{"-d", "float128"}, "float128"},
      {{"-o", "xor"}, "xor"},
      {{"-r", "-2"}, "--root"},
      {{"--coll", "allsum"}, "allsum"},
      {{"--backend", "nccl2"}, "nccl2"},
      {{"--frobnicate"}, "--frobnicate"},
      {{"-z", "1"}, "-z"},
      {{"-b"}, "needs a value"},
      {{"all_reduce", "stray"}, "stray"},
      {{"--timeout", "0"}, "--timeout"},
  };
  for (const Case& c : cases) {
    Result<PerfOptions> o = Parse(c.args);
    ASSERT_FALSE(o.ok()) << "accepted: " << ::testing::PrintToString(c.args);
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(c.needle), std::string::npos)
        << "message '" << o.status().message() << "' does not mention '" << c.needle << "'";
  }
}

TEST(SweepTest, MultiplicativeAndAdditive) {
  PerfOptions o;
  o.min_bytes = 8;
  o.max_bytes = 256;
  o.step_factor = 2;
  EXPECT_EQ(SizeSweep(o), (std::vector<int64_t>{8, 16, 32, 64, 128, 256}));
  o.step_factor = 3;
  EXPECT_EQ(SizeSweep(o), (std::vector<int64_t>{8, 24, 72, 216}));
  o.step_bytes = 100;
  EXPECT_EQ(SizeSweep(o), (std::vector<int64_t>{8, 108, 208}));
  o.step_bytes = 0;
  o.min_bytes = o.max_bytes = 1 << 20;
  EXPECT_EQ(SizeSweep(o), (std::vector<int64_t>{1 << 20}));
  // 8 B .. 256 MiB by 2: the sweep of the report, 26 sizes.
  o.min_bytes = 8;
  o.max_bytes = 256LL << 20;
  o.step_factor = 2;
  EXPECT_EQ(SizeSweep(o).size(), 26u);
}

// --iter-bytes: small sizes run enough iterations for that many bytes, between --iters
// and kMaxIterScale times it; warmups in the same proportion.
TEST(SweepTest, IterationsScaleUpAtSmallSizesOnly) {
  Result<PerfOptions> o = ParseFlags({"all_reduce", "-n", "10", "-w", "3", "-I", "1M"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->iter_bytes, 1 << 20);
  EXPECT_EQ(IterationsAt(*o, 8), 10 * kMaxIterScale);  // capped
  EXPECT_EQ(IterationsAt(*o, 32 << 10), 32);
  EXPECT_EQ(WarmupsAt(*o, 32 << 10), 9);
  EXPECT_EQ(IterationsAt(*o, 1 << 20), 10);  // never fewer than -n
  EXPECT_EQ(IterationsAt(*o, 64 << 20), 10);
  EXPECT_EQ(WarmupsAt(*o, 64 << 20), 3);
  o->iter_bytes = 0;  // the default: -n at every size
  EXPECT_EQ(IterationsAt(*o, 8), 10);
  EXPECT_FALSE(ParseFlags({"--iter-bytes", "lots"}).ok());
}

TEST(BusBwTest, FactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kReduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kSendRecv, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kBarrier, 8), 0.0);

  ModeResult r;
  r.time_us = 1000;  // 1 ms for 1e6 bytes: 1 GB/s
  ComputeBandwidth(Collective::kAllReduce, 4, 1000000, &r);
  EXPECT_DOUBLE_EQ(r.algbw, 1.0);
  EXPECT_DOUBLE_EQ(r.busbw, 1.5);
}

TEST(ShapeTest, NcclTestsLayouts) {
  // all_reduce: 1 MiB of float is 262144 elements in and out.
  CollShape s = ShapeFor(Collective::kAllReduce, 1 << 20, DataType::kFloat32, 4, 1);
  EXPECT_EQ(s.send_count, 262144u);
  EXPECT_EQ(s.recv_count, 262144u);
  EXPECT_EQ(s.param_count, 262144u);
  EXPECT_EQ(s.bytes, 1u << 20);
  // all_gather on 4 ranks: 100 B of float = 25 elements -> 6 per rank, 24 total.
  s = ShapeFor(Collective::kAllGather, 100, DataType::kFloat32, 4, 3);
  EXPECT_EQ(s.send_count, 6u);
  EXPECT_EQ(s.recv_count, 24u);
  EXPECT_EQ(s.param_count, 6u);
  EXPECT_EQ(s.inplace_send_offset, 18u);
  EXPECT_EQ(s.bytes, 96u);
  // reduce_scatter: the input is the big buffer; in place receives into its own block.
  s = ShapeFor(Collective::kReduceScatter, 64, DataType::kFloat64, 2, 1);
  EXPECT_EQ(s.send_count, 8u);
  EXPECT_EQ(s.recv_count, 4u);
  EXPECT_EQ(s.inplace_recv_offset, 4u);
  // Tiny sizes still move one element per rank.
  s = ShapeFor(Collective::kAllToAll, 1, DataType::kFloat32, 8, 0);
  EXPECT_EQ(s.param_count, 1u);
  EXPECT_EQ(s.send_count, 8u);
  EXPECT_EQ(ShapeFor(Collective::kBarrier, 1024, DataType::kFloat32, 2, 0).bytes, 0u);
}

TEST(PatternTest, ExpectedValuesByHand) {
  // Inputs: 1 + (index + 3*rank) % 7.
  EXPECT_EQ(InputValue(Collective::kAllReduce, ReduceOp::kSum, 0, 0), 1);
  EXPECT_EQ(InputValue(Collective::kAllReduce, ReduceOp::kSum, 1, 0), 4);
  EXPECT_EQ(InputValue(Collective::kAllReduce, ReduceOp::kSum, 2, 5), 5);  // (5+6)%7=4
  double v = 0;
  // all_reduce sum over 3 ranks at index 5: 6 + 2 + 5 = 13.
  ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kSum, 0, 3, 0, 10, 5, &v));
  EXPECT_EQ(v, 13);
  ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kMax, 2, 3, 0, 10, 5, &v));
  EXPECT_EQ(v, 6);
  ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kMin, 2, 3, 0, 10, 5, &v));
  EXPECT_EQ(v, 2);
  // prod uses 1 + (index + rank) % 2: index 0 over 3 ranks is 1*2*1.
  ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kProd, 0, 3, 0, 10, 0, &v));
  EXPECT_EQ(v, 2);
  ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kAvg, 0, 2, 0, 10, 0, &v));
  EXPECT_EQ(v, 2.5);  // (1 + 4) / 2
  // reduce_scatter, 2 ranks, count 4: rank 1 gets indices 4..7 of the sum; index 4+1=5:
  // rank0 (5%7)+1=6, rank1 (8%7)+1=2 -> 8.
  ASSERT_TRUE(ExpectedValue(Collective::kReduceScatter, ReduceOp::kSum, 1, 2, 0, 4, 1, &v));
  EXPECT_EQ(v, 8);
  // all_gather, count 3: element 4 is rank 1's index 1: 1 + (1+3)%7 = 5.
  ASSERT_TRUE(ExpectedValue(Collective::kAllGather, ReduceOp::kSum, 0, 2, 0, 3, 4, &v));
  EXPECT_EQ(v, 5);
  // all_to_all, count 2, rank 1: element 0 is rank 0's block 1 index 0 = its index 2: 3.
  ASSERT_TRUE(ExpectedValue(Collective::kAllToAll, ReduceOp::kSum, 1, 2, 0, 2, 0, &v));
  EXPECT_EQ(v, 3);
  // sendrecv: rank 0 of 3 receives from rank 2: index 0 -> 1 + 6 = 7.
  ASSERT_TRUE(ExpectedValue(Collective::kSendRecv, ReduceOp::kSum, 0, 3, 0, 4, 0, &v));
  EXPECT_EQ(v, 7);
  // broadcast from root 1: index 0 -> 4 everywhere.
  ASSERT_TRUE(ExpectedValue(Collective::kBroadcast, ReduceOp::kSum, 0, 2, 1, 4, 0, &v));
  EXPECT_EQ(v, 4);
  // scatter from root 1, count 2: rank 1 element 1 = root's index 3: 1 + (3+3)%7 = 7.
  ASSERT_TRUE(ExpectedValue(Collective::kScatter, ReduceOp::kSum, 1, 2, 1, 2, 1, &v));
  EXPECT_EQ(v, 7);
  // Not significant: reduce and gather off the root.
  EXPECT_FALSE(ExpectedValue(Collective::kReduce, ReduceOp::kSum, 1, 2, 0, 4, 0, &v));
  EXPECT_FALSE(ExpectedValue(Collective::kGather, ReduceOp::kSum, 1, 2, 0, 4, 0, &v));
}

TEST(PatternTest, CountWrongFindsEachBadElement) {
  const int n = 2;
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8,
                     DataType::kUint8, DataType::kInt32, DataType::kInt64}) {
    CollShape s = ShapeFor(Collective::kAllReduce, 64 * DataTypeSize(t), t, n, 0);
    std::vector<char> buf(s.recv_count * DataTypeSize(t));
    double v = 0;
    for (size_t i = 0; i < s.recv_count; ++i) {
      ASSERT_TRUE(ExpectedValue(Collective::kAllReduce, ReduceOp::kSum, 0, n, 0, s.param_count, i, &v));
      StoreElement(t, buf.data(), i, v);
    }
    EXPECT_EQ(CountWrong(Collective::kAllReduce, t, ReduceOp::kSum, 0, n, 0, s, buf.data()), 0) << DataTypeName(t);
    StoreElement(t, buf.data(), 3, 100);
    StoreElement(t, buf.data(), 63, 0);
    EXPECT_EQ(CountWrong(Collective::kAllReduce, t, ReduceOp::kSum, 0, n, 0, s, buf.data()), 2) << DataTypeName(t);
    ClearBuffer(t, s.recv_count, buf.data());
    EXPECT_EQ(CountWrong(Collective::kAllReduce, t, ReduceOp::kSum, 0, n, 0, s, buf.data()), 64) << DataTypeName(t);
  }
}

TEST(PatternTest, HalfAndBFloat16Conversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);       // overflow -> inf
  EXPECT_EQ(FloatToHalf(5.96046448e-8f), 1);  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  for (int i = -2048; i <= 2048; ++i) EXPECT_EQ(HalfToFloat(FloatToHalf(static_cast<float>(i))), i);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
  for (int i = -256; i <= 256; ++i) EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(static_cast<float>(i))), i);
}

Line SampleLine() {
  Line l;
  l.bytes = 1048576;
  l.count = 262144;
  l.type = "float";
  l.redop = "sum";
  l.root = -1;
  l.out_of_place = {true, 523.4, 2.0, 2.0, true, 0};
  l.in_place = {true, 12345.6, 0.08, 0.08, true, 3};
  return l;
}

TEST(ReportTest, LineHasNcclTestsColumns) {
  const std::string s = FormatLine(SampleLine());
  EXPECT_EQ(s,
            "     1048576        262144     float     sum      -1     523.4    2.00    2.00       0     12346    "
            "0.08    0.08       3\n");
  Line unchecked = SampleLine();
  unchecked.out_of_place.checked = false;
  unchecked.in_place.ran = false;
  const std::string u = FormatLine(unchecked);
  EXPECT_NE(u.find("2.00     N/A       N/A"), std::string::npos) << u;
  EXPECT_NE(u.find("N/A     N/A     N/A     N/A"), std::string::npos) << u;
}

TEST(ReportTest, HeaderAndFooter) {
  const std::string h = FormatColumnHeader();
  for (const char* col : {"out-of-place", "in-place", "size", "count", "type", "redop", "root", "time", "algbw",
                          "busbw", "#wrong", "(GB/s)", "(us)"}) {
    EXPECT_NE(h.find(col), std::string::npos) << col;
  }
  RunInfo info;
  info.backend = "gloo";
  info.algo = "ring";
  info.nranks = 2;
  info.hosts = {"a", "b"};
  const std::string head = FormatHeader(info);
  EXPECT_NE(head.find("backend: gloo  algo: ring"), std::string::npos) << head;
  EXPECT_NE(head.find("rank 1 host b"), std::string::npos) << head;
  const std::vector<Line> lines = {SampleLine()};
  EXPECT_DOUBLE_EQ(AverageBusBw(lines), 1.04);
  const std::string f = FormatFooter(lines, true);
  EXPECT_NE(f.find("# Out of bounds values : 3 FAILED"), std::string::npos) << f;
  EXPECT_NE(f.find("# Avg bus bandwidth    : 1.04"), std::string::npos) << f;
}

TEST(ReportTest, CsvAndJson) {
  RunInfo info;
  info.backend = "gloo";
  info.algo = "ring, legacy";
  info.coll = Collective::kAllReduce;
  info.nranks = 2;
  const std::string row = CsvRow(info, SampleLine());
  EXPECT_EQ(row,
            "gloo,ring; legacy,all_reduce,2,1048576,262144,float,sum,-1,523.400,2.0000,2.0000,0,"
            "12345.600,0.0800,0.0800,3\n");
  // As many fields as the header.
  auto fields = [](const std::string& s) { return std::count(s.begin(), s.end(), ',') + 1; };
  EXPECT_EQ(fields(row), fields(CsvHeader()));
  const std::string json = FormatJson(info, {SampleLine()});
  EXPECT_NE(json.find("\"size\": 1048576"), std::string::npos) << json;
  EXPECT_NE(json.find("\"wrong\": 3"), std::string::npos) << json;
}

}  // namespace
}  // namespace perf
}  // namespace chorus
