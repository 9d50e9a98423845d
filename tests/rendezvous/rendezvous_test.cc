// Join (env://, tcp://, file://) with ranks as threads, the bootstrap all-gather
// and barrier, including ranks that never arrive and stale rendezvous files.
#include "rendezvous/rendezvous.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "rendezvous/bootstrap.h"
#include "rendezvous/init_method.h"
#include "tests/rendezvous/store_fixture.h"

namespace chorus::rendezvous {
namespace {

using std::chrono::milliseconds;

#define EXPECT_CONTAINS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

// A port that was free a moment ago.
uint16_t FreePort() {
  auto probe = StoreServer::Start("127.0.0.1", 0);
  EXPECT_TRUE(probe.ok());
  return probe.value()->port();
}

std::string TempPath(const std::string& name) {
  std::string path = ::testing::TempDir() + "/chorus_rdv_" + name + "_" + std::to_string(getpid());
  std::remove(path.c_str());
  return path;
}

// Join + all-gather of "rank r" strings: checks every rank sees everyone's value.
Status JoinAndGather(const InitSpec& spec, bool* hosts_store) {
  Result<Rendezvous> rdv = Join(spec, Deadline::AfterMs(10000));
  if (!rdv.ok()) return rdv.status();
  *hosts_store = rdv.value().server != nullptr;
  Result<std::vector<std::string>> all = AllGather(*rdv.value().store, "test/gather", spec.rank, spec.world_size,
                                                   "rank " + std::to_string(spec.rank), Deadline::AfterMs(10000));
  if (!all.ok()) return all.status();
  for (int r = 0; r < spec.world_size; ++r) {
    if (all.value()[r] != "rank " + std::to_string(r))
      return InternalError("wrong value for rank " + std::to_string(r));
  }
  Status st = Barrier(*rdv.value().store, "test/done", spec.rank, spec.world_size, Deadline::AfterMs(10000));
  if (!st.ok()) return st;
  // Keep the store alive until everyone has read the barrier's answer: the others say
  // so, and the host leaves last.
  if (rdv.value().server == nullptr) return rdv.value().store->Set("test/left/" + std::to_string(spec.rank), "1");
  std::vector<std::string> left;
  for (int r = 0; r < spec.world_size; ++r) {
    if (r != spec.rank) left.push_back("test/left/" + std::to_string(r));
  }
  return left.empty() ? Status::Ok() : rdv.value().store->MultiGet(left, milliseconds(10000)).status();
}

TEST(Join, EnvWithFourRanks) {
  const uint16_t port = FreePort();
  std::atomic<int> hosts{0};
  auto st = RunRanks(4, [&](int r) {
    Result<InitSpec> spec = ResolveInit("env://", -1, -1,
                                        MapEnv({{"MASTER_ADDR", "127.0.0.1"},
                                                {"MASTER_PORT", std::to_string(port)},
                                                {"RANK", std::to_string(r)},
                                                {"WORLD_SIZE", "4"}}));
    if (!spec.ok()) return spec.status();
    bool host = false;
    Status s = JoinAndGather(spec.value(), &host);
    if (host) {
      ++hosts;
      if (r != 0) return InternalError("rank " + std::to_string(r) + " hosts the store");
    }
    return s;
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  EXPECT_EQ(hosts.load(), 1);
}

TEST(Join, TcpWithThreeRanks) {
  const std::string url = "tcp://127.0.0.1:" + std::to_string(FreePort());
  auto st = RunRanks(3, [&](int r) {
    Result<InitSpec> spec = ResolveInit(url, r, 3, MapEnv({}));
    if (!spec.ok()) return spec.status();
    bool host = false;
    return JoinAndGather(spec.value(), &host);
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
}

TEST(Join, RankZeroUsesAnExternalStoreWhenThePortIsTaken) {
  auto external = StoreServer::Start("", 0);
  ASSERT_TRUE(external.ok());
  const std::string url = "tcp://127.0.0.1:" + std::to_string(external.value()->port());
  auto st = RunRanks(2, [&](int r) {
    Result<InitSpec> spec = ResolveInit(url, r, 2, MapEnv({}));
    if (!spec.ok()) return spec.status();
    bool host = true;
    Status s = JoinAndGather(spec.value(), &host);
    if (host) return InternalError("rank " + std::to_string(r) + " started a store although the port was taken");
    return s;
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
}

TEST(Join, UnreachableMasterNamesTheAddressAndTheWait) {
  const uint16_t port = FreePort();
  Result<InitSpec> spec = ResolveInit("tcp://127.0.0.1:" + std::to_string(port), 1, 2, MapEnv({}));
  ASSERT_TRUE(spec.ok());
  auto start = Clock::now();
  Result<Rendezvous> rdv = Join(spec.value(), Deadline::AfterMs(300));
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(), 3000);
  ASSERT_FALSE(rdv.ok());
  EXPECT_EQ(rdv.status().code(), StatusCode::kTimeout);
  EXPECT_CONTAINS(rdv.status().message(), "127.0.0.1:" + std::to_string(port));
  EXPECT_CONTAINS(rdv.status().message(), "within");
  EXPECT_CONTAINS(rdv.status().message(), "rank 1");
}

TEST(Join, FileWithFourRanks) {
  const std::string path = TempPath("file4");
  auto st = RunRanks(4, [&](int r) {
    // Rank 0 comes last: the others must wait for the file.
    if (r == 0) std::this_thread::sleep_for(milliseconds(200));
    Result<InitSpec> spec = ResolveInit("file://" + path, r, 4, MapEnv({}));
    if (!spec.ok()) return spec.status();
    bool host = false;
    return JoinAndGather(spec.value(), &host);
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  std::remove(path.c_str());
}

TEST(Join, FileFromAnEarlierRunIsNotTrusted) {
  const std::string path = TempPath("stale");
  // An earlier run's store that is still alive, with its own nonce and rank 1 claimed.
  {
    Result<InitSpec> old0 = ResolveInit("file://" + path, 0, 2, MapEnv({}));
    Result<InitSpec> old1 = ResolveInit("file://" + path, 1, 2, MapEnv({}));
    ASSERT_TRUE(old0.ok() && old1.ok());
    Result<Rendezvous> a = Join(old0.value(), Deadline::AfterMs(5000));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Result<Rendezvous> b = Join(old1.value(), Deadline::AfterMs(5000));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    // A new rank 1 that finds this file while the old store lives is refused...
    Result<Rendezvous> dup = Join(old1.value(), Deadline::AfterMs(300));
    ASSERT_FALSE(dup.ok());
    EXPECT_CONTAINS(dup.status().message(), path);
    EXPECT_CONTAINS(dup.status().message(), "already claimed");
    // ...and the old store goes away here, leaving the file behind.
  }
  std::ifstream left(path);
  ASSERT_TRUE(left.good()) << "the old run's file should still exist for this test";
  // The new run: ranks 1 and 2 start first and find the stale file; rank 0 replaces it.
  auto st = RunRanks(3, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(milliseconds(400));
    Result<InitSpec> spec = ResolveInit("file://" + path, r, 3, MapEnv({}));
    if (!spec.ok()) return spec.status();
    bool host = false;
    return JoinAndGather(spec.value(), &host);
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  std::remove(path.c_str());
}

TEST(Join, FileThatNeverAppearsIsNamed) {
  const std::string path = TempPath("never");
  Result<InitSpec> spec = ResolveInit("file://" + path, 2, 3, MapEnv({}));
  ASSERT_TRUE(spec.ok());
  Result<Rendezvous> rdv = Join(spec.value(), Deadline::AfterMs(300));
  ASSERT_FALSE(rdv.ok());
  EXPECT_EQ(rdv.status().code(), StatusCode::kTimeout);
  EXPECT_CONTAINS(rdv.status().message(), path);
  EXPECT_CONTAINS(rdv.status().message(), "did not appear");
}

TEST(Join, GarbageFileIsRejectedWithItsReason) {
  const std::string path = TempPath("garbage");
  {
    std::ofstream out(path);
    out << "\x01\x02 not a rendezvous file\n";
  }
  Result<InitSpec> spec = ResolveInit("file://" + path, 1, 2, MapEnv({}));
  ASSERT_TRUE(spec.ok());
  Result<Rendezvous> rdv = Join(spec.value(), Deadline::AfterMs(300));
  ASSERT_FALSE(rdv.ok());
  EXPECT_CONTAINS(rdv.status().message(), path);
  EXPECT_CONTAINS(rdv.status().message(), "does not start with");
  std::remove(path.c_str());
}

TEST(Join, RejectsBadSpecs) {
  InitSpec spec;
  spec.method = "tcp";
  spec.rank = 3;
  spec.world_size = 2;
  EXPECT_EQ(Join(spec, Deadline::AfterMs(100)).status().code(), StatusCode::kInvalidArgument);
  spec.rank = 0;
  spec.method = "carrier-pigeon";
  EXPECT_EQ(Join(spec, Deadline::AfterMs(100)).status().code(), StatusCode::kInvalidArgument);
}

using Bootstrap = StoreServerTest;

TEST_F(Bootstrap, AllGatherWithMissingRanksNamesThem) {
  auto st = RunRanks(4, [&](int r) -> Status {
    if (r >= 2) return Status::Ok();  // ranks 2 and 3 never come
    auto c = Client();
    auto all = AllGather(*c, "ag", r, 4, "x", Deadline::AfterMs(300));
    return all.status();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_EQ(st[r].code(), StatusCode::kTimeout);
    EXPECT_CONTAINS(st[r].message(), "ranks 2, 3 of 4 never arrived within");
  }
  auto c = Client();
  auto one = AllGather(*c, "ag1", 0, 3, "x", Deadline::AfterMs(100));
  ASSERT_FALSE(one.ok());
  EXPECT_CONTAINS(one.status().message(), "ranks 1, 2 of 3");
  ASSERT_TRUE(c->Set("ag2/1", "y").ok());
  one = AllGather(*c, "ag2", 0, 3, "x", Deadline::AfterMs(100));
  EXPECT_CONTAINS(one.status().message(), "rank 2 of 3 never arrived");
  EXPECT_EQ(AllGather(*c, "bad", 3, 3, "x", Deadline::AfterMs(100)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AllGather(*c, "bad", 0, 0, "x", Deadline::AfterMs(100)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(Bootstrap, AllGatherOfOneRankIsImmediate) {
  auto c = Client();
  auto all = AllGather(*c, "solo", 0, 1, "me", Deadline::AfterMs(1000));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value(), std::vector<std::string>{"me"});
}

TEST_F(Bootstrap, BarrierReleasesEveryoneAndCanBeReused) {
  std::atomic<int> passed{0};
  auto st = RunRanks(4, [&](int r) -> Status {
    auto c = Client();
    for (int round = 0; round < 3; ++round) {
      if (r == round) std::this_thread::sleep_for(milliseconds(30));
      CHORUS_RETURN_IF_ERROR(Barrier(*c, "bar", r, 4, Deadline::AfterMs(5000)));
      ++passed;
    }
    return Status::Ok();
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(st[r].ok()) << st[r].ToString();
  EXPECT_EQ(passed.load(), 12);
}

TEST_F(Bootstrap, BarrierTimeoutNamesMissingRanks) {
  auto st = RunRanks(3, [&](int r) -> Status {
    if (r == 1) return Status::Ok();
    auto c = Client();
    return Barrier(*c, "lonely", r, 3, Deadline::AfterMs(300));
  });
  for (int r : {0, 2}) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_EQ(st[r].code(), StatusCode::kTimeout);
    EXPECT_CONTAINS(st[r].message(), "rank 1 of 3 never arrived");
  }
}

TEST(PeerInfo, RoundTripWithAwkwardCharacters) {
  PeerInfo p;
  p.rank = 12;
  p.hostname = "node=7%\nx";
  p.host_id = "node7/0b1c-boot";
  p.pid = 4242;
  p.tcp_address = "10.0.0.7:40000";
  p.interfaces = {"eth0=10.0.0.7", "ib0=192.168.1.7"};
  p.cuda_ipc_off = true;
  p.cores = 96;
  p.machine = "0b1c-boot";
  Result<PeerInfo> q = PeerInfo::Parse(p.Serialize());
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q.value().rank, 12);
  EXPECT_EQ(q.value().hostname, p.hostname);
  EXPECT_EQ(q.value().host_id, p.host_id);
  EXPECT_EQ(q.value().pid, 4242);
  EXPECT_EQ(q.value().tcp_address, p.tcp_address);
  EXPECT_EQ(q.value().interfaces, p.interfaces);
  EXPECT_TRUE(q.value().cuda_ipc_off);
  EXPECT_EQ(q.value().cores, 96);
  EXPECT_EQ(q.value().machine, "0b1c-boot");
  p.cuda_ipc_off = false;
  p.cores = 0;  // not known: not sent, parsed as 0
  EXPECT_EQ(PeerInfo::Parse(p.Serialize()).value().cores, 0);
  EXPECT_EQ(p.Serialize().find("cores="), std::string::npos);
  EXPECT_GT(PeerInfo::Local(0).cores, 0);
  EXPECT_FALSE(PeerInfo::Parse(PeerInfo::Local(0).Serialize() + "cores=many\n").ok());
  EXPECT_FALSE(PeerInfo::Parse(p.Serialize()).value().cuda_ipc_off);
  // Unknown keys from a newer peer are skipped.
  EXPECT_TRUE(PeerInfo::Parse(p.Serialize() + "future=1\n").ok());
}

// Hosts on one machine (network namespaces, containers: one boot id) share its cores:
// each counts the ranks of all of them; a host of unknown machine counts its own.
TEST(PeerInfo, HostSharesCountTheRanksOfTheirMachine) {
  auto peer = [](int rank, const std::string& host, const std::string& machine) {
    PeerInfo p;
    p.rank = rank;
    p.host_id = host;
    p.machine = machine;
    p.cores = 2;
    return p;
  };
  const std::map<std::string, HostShare> s =
      HostShares({peer(0, "ns0", "boot-a"), peer(1, "ns0", "boot-a"), peer(2, "ns1", "boot-a"),
                  peer(3, "ns1", "boot-a"), peer(4, "other", "boot-b"), peer(5, "old", "")});
  EXPECT_EQ(s.at("ns0").ranks, 2);
  EXPECT_EQ(s.at("ns0").machine_ranks, 4);
  EXPECT_EQ(s.at("ns1").machine_ranks, 4);
  EXPECT_EQ(s.at("other").machine_ranks, 1);
  EXPECT_EQ(s.at("old").machine_ranks, 1);
  EXPECT_EQ(s.at("ns0").cores, 2);
  EXPECT_FALSE(PeerInfo::Local(0).machine.empty());  // Linux: /proc/sys/kernel/random/boot_id
}

TEST(PeerInfo, GarbageIsAnErrorNotACrash) {
  const std::string good = [] {
    PeerInfo p;
    p.rank = 1;
    p.hostname = "h";
    p.host_id = "h/b";
    p.pid = 5;
    return p.Serialize();
  }();
  std::vector<std::string> bad = {"",
                                  "garbage",
                                  "chorus-peer 2\nrank=1\n",
                                  "chorus-peer 1\nrank=1\npid=2\nhostname=h\n",  // no host_id
                                  "chorus-peer 1\nrank=-1\npid=2\nhostname=h\nhost_id=x\n",
                                  "chorus-peer 1\nrank=1x\npid=2\nhostname=h\nhost_id=x\n",
                                  "chorus-peer 1\nrank=99999999999999\npid=2\nhostname=h\nhost_id=x\n",
                                  "chorus-peer 1\nrank=1\npid=2\nhostname=h%zz\nhost_id=x\n",
                                  "chorus-peer 1\nrank=1\npid=2\nhostname=h%4\nhost_id=x\n",
                                  "chorus-peer 1\nnoequals\n",
                                  "chorus-peer 1\n=value\n",
                                  good.substr(0, good.size() - 1),  // truncated
                                  std::string(2 << 20, 'x')};
  for (const auto& b : bad) {
    Result<PeerInfo> r = PeerInfo::Parse(b);
    EXPECT_FALSE(r.ok()) << "parsed: " << b.substr(0, 80);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
    }
  }
  uint32_t seed = 99;
  for (int i = 0; i < 2000; ++i) {
    std::string s = good;
    for (int j = 0; j < 3; ++j) {
      seed = seed * 1103515245 + 12345;
      s[(seed >> 8) % s.size()] = static_cast<char>(seed >> 16);
    }
    (void)PeerInfo::Parse(s).ok();
  }
}

TEST(PeerInfo, LocalDescribesThisProcess) {
  PeerInfo me = PeerInfo::Local(3);
  EXPECT_EQ(me.rank, 3);
  EXPECT_EQ(me.pid, getpid());
  EXPECT_FALSE(me.hostname.empty());
  EXPECT_EQ(me.host_id.rfind(me.hostname, 0), 0u) << me.host_id;
  EXPECT_EQ(PeerInfo::Local(5).host_id, me.host_id);
  bool has_loopback = false;
  for (const auto& i : me.interfaces) has_loopback |= i.find("=127.0.0.1") != std::string::npos;
  EXPECT_TRUE(has_loopback);
}

TEST(FormatRankList, CompressesRuns) {
  EXPECT_EQ(FormatRankList({2, 3}), "2, 3");
  EXPECT_EQ(FormatRankList({1, 2, 3, 4, 9}), "1-4, 9");
  EXPECT_EQ(FormatRankList({0}), "0");
  EXPECT_EQ(FormatRankList({}), "");
}

}  // namespace
}  // namespace chorus::rendezvous
