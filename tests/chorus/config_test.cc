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
  EXPECT_EQ(c->tcp_engine, "auto");
  EXPECT_EQ(c->nsocks_per_peer, 2);
  EXPECT_EQ(c->cuda_ipc, "auto");
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
  EXPECT_EQ(c->tcp_engine, "epoll");
  EXPECT_EQ(c->nsocks_per_peer, 4);
  EXPECT_EQ(c->socket_bufsize, 8 << 20);
  EXPECT_EQ(c->stripe_min_bytes, 64 << 10);
  EXPECT_EQ(c->chunk_bytes, 1 << 20);
  EXPECT_EQ(c->scratch_cache_bytes, 0);
  EXPECT_EQ(c->socket_ifname, "^docker,lo");
  EXPECT_EQ(c->algo, "ring");
  EXPECT_EQ(c->cuda_ipc, "off");
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
  for (const char* v : {"auto", "off", "always", "ALWAYS"}) {
    Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC", v}}));
    ASSERT_TRUE(c.ok()) << v << ": " << c.status().ToString();
    std::string want = v;
    for (char& ch : want) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_EQ(c->cuda_ipc, want);
  }
}

TEST(Config, OneGpuAllReduceTakesLeaderOrSplit) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->cuda_ipc_one_gpu, "leader");
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_ONE_GPU", "split"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_ipc_one_gpu, "split");
  ExpectBad("CHORUS_CUDA_IPC_ONE_GPU", "both");
}

TEST(Config, CudaIpcSyncTakesWordsOrEvents) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->cuda_ipc_sync, "words");
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_CUDA_IPC_SYNC", "events"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_ipc_sync, "events");
  ExpectBad("CHORUS_CUDA_IPC_SYNC", "flags");
}

TEST(Config, StagingSyncTakesGateOrSignals) {
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->staging_sync, "signals");
  Result<Config> c = Config::FromEnv(MapEnv({{"CHORUS_STAGING_SYNC", "gate"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->staging_sync, "gate");
  ExpectBad("CHORUS_STAGING_SYNC", "spin");
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
  EXPECT_EQ(c->transport, "rdma");
  EXPECT_EQ(c->ib_hca, "mlx5_0:1");
  EXPECT_EQ(c->ib_gid_index, 3);
  EXPECT_EQ(c->ib_eager_bytes, 16 << 10);
  EXPECT_EQ(c->ib_poll_us, 200);
  EXPECT_EQ(c->ib_peer_timeout_ms, 30000);
  EXPECT_EQ(Config::FromEnv(MapEnv({}))->transport, "auto");
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

TEST(Env, IntBoundsAndUnset) {
  EXPECT_EQ(EnvInt(MapEnv({}), "A", 7).value(), 7);
  EXPECT_EQ(EnvInt(MapEnv({{"A", "42"}}), "A", 7, 0, 100).value(), 42);
  Result<int64_t> r = EnvInt(MapEnv({{"A", "420"}}), "A", 7, 0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("420"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace chorus
