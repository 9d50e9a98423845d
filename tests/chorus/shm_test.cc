// Shared memory between forked ranks of this host, through the public API: a rank
// killed mid-collective is named by every other rank within seconds and leaves no
// segment behind; a directory too small for the rings falls back to TCP saying why, or
// fails naming it where shared memory was forced; hosts told apart by CHORUS_HOSTID
// share no memory; single copy "auto" carries large messages among several peers.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

// A fresh directory under /dev/shm (the tmpfs segments live on), removed at the end.
class ShmDir {
 public:
  ShmDir() {
    char tmpl[] = "/dev/shm/chorus-test-XXXXXX";
    path_ = mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~ShmDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename());
    return out;
  }

 private:
  std::string path_;
};

Options ShmOptions(const std::string& dir, TransportMode transport = TransportMode::kShm,
                   ShmSingleCopy single = ShmSingleCopy::kAuto) {
  Options o = FileInitOptions(/*timeout_ms=*/60000, /*connect_timeout_ms=*/20000);
  Config c = o.config.value_or(Config::Process());
  c.transport = transport;
  c.shm_dir = dir;
  c.shm_single_copy = single;
  o.config = c;
  return o;
}

// CHORUS_SHM_SINGLE_COPY: "on" (the survivors may be reading the aborted or dead
// rank's memory when it goes) and "off" (through the rings).
class ShmKill : public ::testing::TestWithParam<std::string> {};

TEST_P(ShmKill, RankKilledMidAllReduceIsNamedByEveryRankAndLeavesNoSegment) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Options o =
      ShmOptions(dir.path(), TransportMode::kShm, GetParam() == "on" ? ShmSingleCopy::kOn : ShmSingleCopy::kOff);
  const auto start = std::chrono::steady_clock::now();
  auto exits = RunRanks(
      3,
      [&](int rank) {
        auto comm = Communicator::Create(o);
        RANK_OK(comm.status());
        Communicator& c = **comm;
        RANK_CHECK(c.Describe().find("shm (3 ranks") != std::string::npos, c.Describe());
        std::vector<float> big(4 << 20, 1.0f);
        RANK_OK(c.AllReduce(big.data(), big.data(), 1024, DataType::kFloat32, ReduceOp::kSum));
        // Every segment is unlinked once mapped (every rank has, once a call went round):
        // the directory is empty while the communicator works.
        RANK_CHECK(std::filesystem::is_empty(dir.path()), "segments left in " + dir.path());
        if (rank == 2) {
          std::vector<Work> works;
          for (int i = 0; i < 20; ++i) {
            works.push_back(c.IAllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum));
          }
          usleep(30 * 1000);
          kill(getpid(), SIGKILL);
        }
        Status st;
        for (int i = 0; i < 200 && st.ok(); ++i) {
          st = c.AllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
        }
        RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
        RANK_CHECK(st.message().find("rank 2") != std::string::npos, st.message());
        return 0;
      },
      {.timeout_seconds = 60});
  EXPECT_EQ(exits[2].signal, SIGKILL) << exits[2].Describe();
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].Describe();
  // Noticed by the process's exit, far before the 60 s deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(dir.Files().empty()) << dir.Files().size() << " files left in " << dir.path();
}

INSTANTIATE_TEST_SUITE_P(SingleCopy, ShmKill, ::testing::Values("on", "off"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A peer stopped (SIGSTOP) while the others wait on it is named within the peer
// timeout, as stopped; one that is only slow (asleep past the timeout) is waited for.
Options WithPeerTimeout(Options o, int64_t ms) {
  Config c = o.config.value_or(Config::Process());
  c.peer_timeout_ms = ms;
  o.config = c;
  return o;
}

TEST(ShmLiveness, StoppedPeerIsNamedWithinThePeerTimeout) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Options o = WithPeerTimeout(ShmOptions(dir.path()), 2000);
  auto exits =
      RunRanks(3,
               [&](int rank) {
                 auto comm = Communicator::Create(o);
                 RANK_OK(comm.status());
                 Communicator& c = **comm;
                 std::vector<float> v(4096, 1.0f);
                 RANK_OK(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
                 if (rank == 2) {
                   // A child that ends this stopped rank later, so that the test ends too.
                   if (fork() == 0) {
                     sleep(12);
                     kill(getppid(), SIGKILL);
                     _exit(0);
                   }
                   raise(SIGSTOP);
                   return 1;  // not reached: SIGKILL comes first
                 }
                 const auto start = std::chrono::steady_clock::now();
                 Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
                 const auto waited = std::chrono::steady_clock::now() - start;
                 RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
                 RANK_CHECK(st.message().find("rank 2") != std::string::npos, st.message());
                 RANK_CHECK(st.message().find("stopped") != std::string::npos, st.message());
                 // Within the peer timeout plus the checks' period, far from the 60 s deadline.
                 RANK_CHECK(waited < std::chrono::seconds(10), "named after " + std::to_string(waited.count()) + " ns");
                 return 0;
               },
               {.timeout_seconds = 60});
  EXPECT_EQ(exits[2].signal, SIGKILL) << exits[2].Describe();
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].Describe();
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].Describe();
}

TEST(ShmLiveness, SlowPeerIsWaitedFor) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Options o = WithPeerTimeout(ShmOptions(dir.path()), 1000);
  ExpectAllOk(RunRanks(2,
                       [&](int rank) {
                         auto comm = Communicator::Create(o);
                         RANK_OK(comm.status());
                         Communicator& c = **comm;
                         std::vector<float> v(4096, 1.0f);
                         if (rank == 1) usleep(3 * 1000 * 1000);  // busy elsewhere for three peer timeouts
                         RANK_OK(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
                         RANK_CHECK(v[0] == 2.0f, "wrong sum");
                         return c.Shutdown().ok() ? 0 : 1;
                       },
                       {.timeout_seconds = 60}));
}

// A tmpfs of 64 KiB: less than one ring. Needs root (mount); skips naming why otherwise.
class SmallShm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    if (mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, "size=64k") != 0) {
      GTEST_SKIP() << "cannot mount a small tmpfs at " << dir_.path() << ": " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  ShmDir dir_;
  bool mounted_ = false;
};

TEST_F(SmallShm, FallsBackToTcpSayingWhy) {
  const Options o = ShmOptions(dir_.path(), TransportMode::kAuto);
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    const std::string d = (*comm)->Describe();
    RANK_CHECK(d.find("shm") == std::string::npos && d.find("tcp") != std::string::npos, d);
    std::vector<float> x(1000, 1.0f + rank);
    RANK_OK((*comm)->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(x[999] == 3.0f, "wrong sum");
    return 0;
  }));
}

TEST_F(SmallShm, ForcedSharedMemoryFailsNamingTheDirectory) {
  const Options o = ShmOptions(dir_.path(), TransportMode::kShm);
  const std::string dir = dir_.path();
  ExpectAllOk(RunRanks(2, [&](int /*rank*/) {
    auto comm = Communicator::Create(o);
    RANK_CHECK(!comm.ok(), "created a communicator on a 64 KiB tmpfs");
    const std::string m = comm.status().message();
    RANK_CHECK(m.find("CHORUS_TRANSPORT=shm") != std::string::npos, m);
    RANK_CHECK(m.find(dir) != std::string::npos && m.find("free") != std::string::npos, m);
    return 0;
  }));
}

// Two ranks that say they are on two hosts (as two namespaces or machines do) share no
// memory, though they could: the communicator is TCP alone.
TEST(Shm, HostsToldApartShareNoMemory) {
  const Options o = ShmOptions("/dev/shm", TransportMode::kAuto);
  ExpectAllOk(RunRanks(2, [&](int rank) {
    Options mine = o;
    Config c = *o.config;
    c.host_id = "node" + std::to_string(rank);
    mine.config = c;
    auto comm = Communicator::Create(mine);
    RANK_OK(comm.status());
    const std::string d = (*comm)->Describe();
    RANK_CHECK(d.find("shm") == std::string::npos && d.find("tcp") != std::string::npos, d);
    return 0;
  }));
}

// CHORUS_SHM_SINGLE_COPY=auto between processes: every pair reads the other's memory
// (through the rings where 4 ranks outnumber the cores), and large messages arrive intact.
TEST(Shm, AutoSingleCopyCarriesLargeMessagesBetweenManyPeers) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Options o = ShmOptions(dir.path(), TransportMode::kShm, ShmSingleCopy::kAuto);
  ExpectAllOk(RunRanks(4, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    RANK_CHECK(c.Describe().find("shm (4 ranks") != std::string::npos, c.Describe());
    std::vector<float> big(1 << 20, static_cast<float>(rank + 1));
    RANK_OK(c.AllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum));
    for (float v : big) RANK_CHECK(v == 10.0f, "rank " + std::to_string(rank) + " summed " + std::to_string(v));
    return 0;
  }));
}

// Which large messages are read out of the sender's memory, counted by the readers:
// every one with "on", none with "off", and none with "auto" on a host with more ranks
// than cores, where the rings let a sender finish without waiting for its reader.
uint64_t ReadsDuring(Communicator& c, const std::function<Status()>& call, int rank) {
  const uint64_t before = c.Counters().read_messages;
  Status st = call();
  if (!st.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, st.ToString().c_str());
    exit(1);
  }
  return c.Counters().read_messages - before;
}

void ExpectReads(ShmSingleCopy mode, bool reads) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Options o = ShmOptions(dir.path(), TransportMode::kShm, mode);
  ExpectAllOk(RunRanks(4, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    std::vector<float> in(1 << 18, static_cast<float>(rank + 1)), out(4 * in.size());
    const uint64_t gathered = ReadsDuring(
        c, [&] { return c.AllGather(in.data(), out.data(), in.size(), DataType::kFloat32); }, rank);
    for (size_t i = 0; i < out.size(); ++i) {
      const size_t from = i / in.size();  // the rank whose block this is
      RANK_CHECK(out[i] == static_cast<float>(from + 1), "gathered");
    }
    std::vector<float> data(out.size(), static_cast<float>(rank));
    const uint64_t broadcast = ReadsDuring(
        c, [&] { return c.Broadcast(data.data(), data.size(), DataType::kFloat32, 0); }, rank);
    for (float v : data) RANK_CHECK(v == 0.0f, "rank " + std::to_string(rank) + " got " + std::to_string(v));
    RANK_CHECK((gathered > 0) == reads,
               "rank " + std::to_string(rank) + ": all_gather read " + std::to_string(gathered) + " messages");
    // The root only sends; every other rank receives the whole buffer from its parent.
    RANK_CHECK(rank == 0 || (broadcast > 0) == reads,
               "rank " + std::to_string(rank) + ": broadcast read " + std::to_string(broadcast) + " messages");
    return 0;
  }));
}

TEST(ShmSingleCopy, OnReadsEveryLargeMessage) { ExpectReads(ShmSingleCopy::kOn, true); }
TEST(ShmSingleCopy, OffReadsNone) { ExpectReads(ShmSingleCopy::kOff, false); }
TEST(ShmSingleCopy, CrowdedAutoReadsNone) {
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 4) GTEST_SKIP() << "needs a host with fewer than 4 cores (4 ranks crowd it)";
  ExpectReads(ShmSingleCopy::kAuto, false);
}

// A large message is read together with its sender: the receiver reads pieces while the
// sender, waiting for its kAck, writes others into the receiver's buffer. Every byte
// lands where it belongs (a pattern, not a constant; a last piece cut short), and the
// idle sender wrote some of the pieces.
TEST(ShmSingleCopy, SenderWritesPiecesOfLargeMessagesIntoTheReader) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  Options o = ShmOptions(dir.path(), TransportMode::kShm, ShmSingleCopy::kOn);
  Config c = *o.config;
  c.chunk_bytes = size_t{64} << 20;  // one message per broadcast
  o.config = c;
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& cm = **comm;
    const size_t count = ((size_t{40} << 20) + 12) / sizeof(int32_t);
    std::vector<int32_t> v(count);
    for (int round = 0; round < 10; ++round) {
      for (size_t i = 0; i < count; ++i) v[i] = rank == 0 ? static_cast<int32_t>(i * 7 + round) : -1;
      RANK_OK(cm.Broadcast(v.data(), count, DataType::kInt32, 0));
      for (size_t i = 0; i < count; ++i) {
        RANK_CHECK(v[i] == static_cast<int32_t>(i * 7 + round),
                   "round " + std::to_string(round) + ": element " + std::to_string(i) + " is " + std::to_string(v[i]));
      }
    }
    const TrafficCounters t = cm.Counters();
    RANK_CHECK(rank != 1 || t.read_messages == 10, "rank 1 read " + std::to_string(t.read_messages) + " messages");
    RANK_CHECK(rank != 0 || t.written_pieces > 0, "rank 0 wrote no piece of 10 messages of 40 MiB into rank 1");
    RANK_CHECK(rank != 1 || t.written_pieces == 0, "rank 1 only received, yet wrote pieces");
    return 0;
  }));
}

// A sender killed while it helps its reader (broadcasts of 40 MiB, read together) is
// named by the reader, which may be waiting for the piece the sender was writing.
TEST(ShmSingleCopy, SenderKilledWhileWritingIsNamedByItsReader) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  Options o = ShmOptions(dir.path(), TransportMode::kShm, ShmSingleCopy::kOn);
  Config c = *o.config;
  c.chunk_bytes = size_t{64} << 20;
  o.config = c;
  auto exits = RunRanks(2,
                        [&](int rank) {
                          auto comm = Communicator::Create(o);
                          RANK_OK(comm.status());
                          Communicator& cm = **comm;
                          std::vector<int32_t> v((size_t{40} << 20) / sizeof(int32_t), 7);
                          RANK_OK(cm.Broadcast(v.data(), v.size(), DataType::kInt32, 0));
                          if (rank == 0) {
                            std::vector<Work> works;
                            for (int i = 0; i < 20; ++i)
                              works.push_back(cm.IBroadcast(v.data(), v.size(), DataType::kInt32, 0));
                            usleep(20 * 1000);
                            kill(getpid(), SIGKILL);
                          }
                          Status st;
                          for (int i = 0; i < 500 && st.ok(); ++i)
                            st = cm.Broadcast(v.data(), v.size(), DataType::kInt32, 0);
                          RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
                          RANK_CHECK(st.message().find("rank 0") != std::string::npos, st.message());
                          return 0;
                        },
                        {.timeout_seconds = 60});
  EXPECT_EQ(exits[0].signal, SIGKILL) << exits[0].Describe();
  EXPECT_TRUE(exits[1].exited && exits[1].code == 0) << exits[1].Describe();
  EXPECT_TRUE(dir.Files().empty()) << dir.Files().size() << " files left in " << dir.path();
}

// The processes watched for their death are the peers a rank exchanged with, not every
// rank of the host: after a ring all-reduce among 12 ranks, each holds a pidfd for its
// two ring neighbours only. And the ring still names a neighbour killed afterwards.
int OpenPidfds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() == "anon_inode:[pidfd]") ++n;
  }
  return n;
}

TEST(ShmLiveness, OnlyThePeersExchangedWithAreWatched) {
  ShmDir dir;
  ASSERT_FALSE(dir.path().empty());
  Options o = ShmOptions(dir.path());
  Config c = *o.config;
  c.algo = algos::Algorithm::kRing;
  o.config = c;
  constexpr int kRanks = 12;
  auto exits =
      RunRanks(kRanks,
               [&](int rank) {
                 const int before = OpenPidfds();
                 auto comm = Communicator::Create(o);
                 RANK_OK(comm.status());
                 Communicator& cm = **comm;
                 std::vector<float> v(4096, 1.0f);
                 RANK_OK(cm.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
                 RANK_CHECK(v[0] == kRanks && v.back() == kRanks, "sum " + std::to_string(v[0]));
                 // The proxy opens them within its poll period; wait for both, bounded.
                 int watched = 0;
                 for (int i = 0; i < 200 && (watched = OpenPidfds() - before) < 2; ++i) usleep(10 * 1000);
                 usleep(50 * 1000);  // and none beyond them
                 watched = OpenPidfds() - before;
                 RANK_CHECK(watched == 2, "rank " + std::to_string(rank) + " watches " + std::to_string(watched) +
                                              " processes, not its 2 ring neighbours");
                 // A rank leaves this barrier only once every rank entered it, so everyone has
                 // counted before rank 5 dies (a neighbour that exits closes its pidfd); the others
                 // may still be in it then, and fail it naming rank 5.
                 Status st = cm.Barrier();
                 if (rank == 5) kill(getpid(), SIGKILL);
                 for (int i = 0; i < 100 && st.ok(); ++i) {
                   st = cm.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
                 }
                 RANK_CHECK(st.code() == StatusCode::kPeerFailed && st.message().find("rank 5") != std::string::npos,
                            st.ToString());
                 return 0;
               },
               {.timeout_seconds = 90});
  for (int r = 0; r < kRanks; ++r) {
    if (r == 5) continue;
    EXPECT_TRUE(exits[r].exited && exits[r].code == 0) << exits[r].Describe();
  }
}

}  // namespace
}  // namespace chorus::testing
