// Configuration from CHORUS_* variables: defaults, good values, and errors that name
// the variable and its bad value.
#include "chorus/config.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "common/env.h"
#include "common/log.h"

namespace chorus {
namespace {

TEST(Config, DefaultsWhenNothingIsSet) {
  Result<Config> c = Config::FromEnv(MapEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->timeout_ms, 30 * 60 * 1000);
  EXPECT_EQ(c->tcp_engine, TcpEngine::kAuto);
  EXPECT_EQ(c->nsocks_per_peer, 2);
  EXPECT_EQ(c->cuda_ipc, CudaIpcMode::kAuto);
  EXPECT_FALSE(c->algo.has_value());
}

TEST(Config, ReadsEveryVariable) {
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_TIMEOUT", "90"},
                                             {"CHORUS_CONNECT_TIMEOUT", "5"},
                                             {"CHORUS_TCP_ENGINE", "EPOLL"},
                                             {"CHORUS_NSOCKS_PERPEER", "4"},
                                             {"CHORUS_SOCKET_BUFSIZE", "8M"},
                                             {"CHORUS_STRIPE_MIN", "64K"},
                                             {"CHORUS_CHUNK_BYTES", "1M"},
                                             {"CHORUS_SCRATCH_CACHE", "0"},
                                             {"CHORUS_SOCKET_IFNAME", "^docker,lo"},
                                             {"CHORUS_ALGO", "ring"},
                                             {"CHORUS_CUDA_IPC", "OFF"},
                                             {"CHORUS_EARLY_PAUSE", "8M"},
                                             {"CHORUS_EARLY_RESUME", "2M"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->timeout_ms, 90000);
  EXPECT_EQ(c->connect_timeout_ms, 5000);
  EXPECT_EQ(c->tcp_engine, TcpEngine::kEpoll);
  EXPECT_EQ(c->nsocks_per_peer, 4);
  EXPECT_EQ(c->socket_bufsize, 8 << 20);
  EXPECT_EQ(c->stripe_min_bytes, 64 << 10);
  EXPECT_EQ(c->chunk_bytes, 1 << 20);
  EXPECT_EQ(c->scratch_cache_bytes, 0);
  EXPECT_EQ(c->socket_ifname, "^docker,lo");
  EXPECT_EQ(c->algo, algos::Algorithm::kRing);
  EXPECT_EQ(c->cuda_ipc, CudaIpcMode::kOff);
  EXPECT_EQ(c->early_pause_bytes, 8 << 20);
  EXPECT_EQ(c->early_resume_bytes, 2 << 20);
}

void ExpectBad(const std::string& name, const std::string& value) {
  Result<Config> c = Config::FromEnv(MapEnv({{name, value}}));
  ASSERT_FALSE(c.ok()) << name << "=" << value << " was accepted";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(name), std::string::npos) << c.status().message();
}

TEST(Config, CudaIpcTakesAutoOffAndAlways) {
  for (auto [text, want] : {std::pair<const char*, CudaIpcMode>{"auto", CudaIpcMode::kAuto},
                            {"off", CudaIpcMode::kOff},
                            {"always", CudaIpcMode::kAlways},
                            {"ALWAYS", CudaIpcMode::kAlways}}) {
    Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC", text}}));
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().ToString();
    EXPECT_EQ(c->cuda_ipc, want) << text;
    EXPECT_STREQ(ModeName(c->cuda_ipc), std::string(text) == "ALWAYS" ? "always" : text);
  }
}

TEST(Config, OneGpuAllReduceTakesLeaderOrSplit) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->cuda_ipc_one_gpu, CudaIpcOneGpu::kLeader);
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_ONE_GPU", "split"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_ipc_one_gpu, CudaIpcOneGpu::kSplit);
  ExpectBad("CHORUS_CUDA_IPC_ONE_GPU", "both");
}

TEST(Config, CudaIpcSyncTakesFlagsOrEvents) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->cuda_ipc_sync, CudaIpcSync::kFlags);
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_SYNC", "events"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_ipc_sync, CudaIpcSync::kEvents);
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_SYNC", "flags"}}))->cuda_ipc_sync, CudaIpcSync::kFlags);
  // The old name of flags still works (with a warning).
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_SYNC", "words"}}))->cuda_ipc_sync, CudaIpcSync::kFlags);
  ExpectBad("CHORUS_CUDA_IPC_SYNC", "semaphores");
}

TEST(Config, StagingSyncTakesSignalsOrKernel) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->staging_sync, StagingSync::kSignals);
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_STAGING_SYNC", "kernel"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->staging_sync, StagingSync::kKernel);
  // The old name of kernel still works (with a warning).
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_STAGING_SYNC", "gate"}}))->staging_sync, StagingSync::kKernel);
  ExpectBad("CHORUS_STAGING_SYNC", "spin");
}

TEST(Config, ABadModeNamesTheVariableTheValueAndTheAllowedValues) {
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_TRANSPORT", "infiniband"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "CHORUS_TRANSPORT='infiniband' is not allowed; allowed: auto, shm, tcp, rdma");
  Result<Config> a = Config::FromEnv(MapEnv({{"CHORUS_ALGO", "butterfly"}}));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("CHORUS_ALGO='butterfly'"), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("recursive_doubling"), std::string::npos) << a.status().message();
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_ALGO", "RD"}}))->algo, algos::Algorithm::kRecursiveDoubling);
}

// The table lists what the parser reads: each variable but a text one, set to a bad
// value, is refused naming it; each default, read back, is the default; a value set
// shows in its row.
TEST(Config, TheSettingsTableDescribesWhatTheParserReads) {
  const std::vector<SettingRow> rows = Settings();
  ASSERT_GT(rows.size(), 20u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SettingRow& row = rows[i];
    SCOPED_TRACE(row.name);
    EXPECT_FALSE(row.meaning.empty());
    EXPECT_FALSE(row.allowed.empty());
    if (row.name == "CHORUS_DEBUG") continue;  // the log reads it, not Config
    if (row.type != "text") ExpectBad(row.name, "not-a-value");
    if (row.default_value.front() == '(') continue;  // described, not a value
    Result<Config> c = Config::FromEnv(MapEnv({{row.name, row.default_value}}));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(Settings(c.value())[i].default_value, row.default_value);
  }
  Result<Config> set = Config::FromEnv(MapEnv({{"CHORUS_CHUNK_BYTES", "1M"}, {"CHORUS_STAGING_SYNC", "kernel"}}));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  for (const SettingRow& row : Settings(set.value())) {
    if (row.name == "CHORUS_CHUNK_BYTES") {
      EXPECT_EQ(row.default_value, "1M");
    }
    if (row.name == "CHORUS_STAGING_SYNC") {
      EXPECT_EQ(row.default_value, "kernel");
    }
  }
}

TEST(Config, StagingWindowIsBytesZeroOrAtLeast4K) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->staging_window_bytes, int64_t{64} << 20);
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_STAGING_WINDOW", "16M"}}))->staging_window_bytes, int64_t{16} << 20);
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_STAGING_WINDOW", "0"}}))->staging_window_bytes, 0);
  ExpectBad("CHORUS_STAGING_WINDOW", "100");
  ExpectBad("CHORUS_STAGING_WINDOW", "lots");
}

TEST(Config, GarbageIsAnErrorNamingTheVariable) {
  ExpectBad("CHORUS_TIMEOUT", "soon");
  ExpectBad("CHORUS_TIMEOUT", "-5");
  ExpectBad("CHORUS_TIMEOUT", "12abc");
  ExpectBad("CHORUS_TCP_ENGINE", "dpdk");
  ExpectBad("CHORUS_CUDA_IPC", "yes please");
  ExpectBad("CHORUS_EARLY_RESUME", "128M");  // above the default PAUSE threshold
  ExpectBad("CHORUS_NSOCKS_PERPEER", "0");
  ExpectBad("CHORUS_NSOCKS_PERPEER", "1000");
  ExpectBad("CHORUS_SOCKET_BUFSIZE", "lots");
  ExpectBad("CHORUS_CHUNK_BYTES", "12");
  ExpectBad("CHORUS_STRIPE_MIN", "4Q");
  ExpectBad("CHORUS_SCRATCH_CACHE", "-1M");
  ExpectBad("CHORUS_TRANSPORT", "infiniband");
  ExpectBad("CHORUS_IB_GID_INDEX", "two");
  ExpectBad("CHORUS_IB_GID_INDEX", "-7");
  ExpectBad("CHORUS_IB_EAGER_BYTES", "2G");
  ExpectBad("CHORUS_IB_POLL_US", "forever");
  ExpectBad("CHORUS_IB_PEER_TIMEOUT", "0");
  ExpectBad("CHORUS_PEER_TIMEOUT", "0");
  ExpectBad("CHORUS_PEER_TIMEOUT", "soon");
  ExpectBad("CHORUS_SPIN_US", "-1");
  ExpectBad("CHORUS_SPIN_US", "a while");
}

TEST(Config, SpinDefaultsOnAndCanBeTurnedOff) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->spin_us, 100);
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_SPIN_US", "0"}}))->spin_us, 0);
  EXPECT_EQ(Config::FromEnv(MapEnv({{"CHORUS_SPIN_US", "2000"}}))->spin_us, 2000);
}

TEST(Config, ReadsTheRdmaVariables) {
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_TRANSPORT", "rdma"},
                                             {"CHORUS_IB_HCA", "mlx5_0:1"},
                                             {"CHORUS_IB_GID_INDEX", "3"},
                                             {"CHORUS_IB_EAGER_BYTES", "16K"},
                                             {"CHORUS_IB_POLL_US", "200"},
                                             {"CHORUS_IB_PEER_TIMEOUT", "30"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->transport, TransportMode::kRdma);
  EXPECT_EQ(c->ib_hca, "mlx5_0:1");
  EXPECT_EQ(c->ib_gid_index, 3);
  EXPECT_EQ(c->ib_eager_bytes, 16 << 10);
  EXPECT_EQ(c->ib_poll_us, 200);
  EXPECT_EQ(c->ib_peer_timeout_ms, 30000);
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->transport, TransportMode::kAuto);
}

TEST(Config, OnePeerTimeoutForTcpAndRdmaUnlessRdmaHasItsOwn) {
  Result<Config> d = Config::FromEnv(MapEnv({}));
  EXPECT_EQ(d->peer_timeout_ms, 30000);
  EXPECT_EQ(d->rdma_peer_timeout_ms(), 30000);
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_PEER_TIMEOUT", "5"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->peer_timeout_ms, 5000);
  EXPECT_EQ(c->rdma_peer_timeout_ms(), 5000);
  c = Config::FromEnv(MapEnv({{"CHORUS_PEER_TIMEOUT", "5"}, {"CHORUS_IB_PEER_TIMEOUT", "12"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->peer_timeout_ms, 5000);
  EXPECT_EQ(c->rdma_peer_timeout_ms(), 12000);
}

TEST(Env, ByteSizes) {
  EXPECT_EQ(ParseByteSize("X", "0").value(), 0);
  EXPECT_EQ(ParseByteSize("X", "512K").value(), 512 << 10);
  EXPECT_EQ(ParseByteSize("X", "4M").value(), 4 << 20);
  EXPECT_EQ(ParseByteSize("X", "1G").value(), int64_t{1} << 30);
  Result<int64_t> bad = ParseByteSize("CHORUS_X", "9999999999999G");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CHORUS_X"), std::string::npos);
  EXPECT_FALSE(ParseByteSize("X", "").ok());
  EXPECT_FALSE(ParseByteSize("X", "M").ok());
}

// Text from the store or a peer: every malformed value is an error naming it, none throws.
TEST(Env, UnsignedFromUntrustedText) {
  EXPECT_EQ(ParseUnsigned("id", "0").value(), 0u);
  EXPECT_EQ(ParseUnsigned("id", "18446744073709551615").value(), UINT64_MAX);
  for (const char* bad :
       {"", "-1", "+1", " 1", "1 ", "0x10", "12a", "18446744073709551616", "99999999999999999999999"}) {
    Result<uint64_t> r = ParseUnsigned("communicator id", bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("communicator id"), std::string::npos) << r.status().ToString();
  }
}

TEST(Env, IntBoundsAndUnset) {
  EXPECT_EQ(EnvInt(MapEnv({}), "A", 7).value(), 7);
  EXPECT_EQ(EnvInt(MapEnv({{"A", "42"}}), "A", 7, 0, 100).value(), 42);
  Result<int64_t> r = EnvInt(MapEnv({{"A", "420"}}), "A", 7, 0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("420"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace chorus
