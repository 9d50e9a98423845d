#include "nccl/unique_id.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nccl/nccl.h"
#include "rendezvous/net_util.h"
#include "tests/util/multiproc.h"

namespace chorus::nccl {
namespace {

TEST(UniqueIdTest, RoundTrip) {
  IdContents c;
  c.host = "10.1.2.3";
  c.port = 54321;
  for (size_t i = 0; i < c.nonce.size(); ++i) c.nonce[i] = static_cast<uint8_t>(i * 17 + 1);
  std::array<char, kIdBytes> bytes{};
  ASSERT_TRUE(EncodeId(c, &bytes).ok());
  Result<IdContents> d = DecodeId(bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d.value().host, c.host);
  EXPECT_EQ(d.value().port, c.port);
  EXPECT_EQ(d.value().nonce, c.nonce);
  static_assert(sizeof(ncclUniqueId) == kIdBytes, "NCCL's id size");
}

TEST(UniqueIdTest, EncodeRefusesBadFields) {
  std::array<char, kIdBytes> bytes{};
  IdContents c;
  c.port = 1;
  EXPECT_FALSE(EncodeId(c, &bytes).ok());  // no host
  c.host = std::string(kMaxIdHost + 1, 'a');
  EXPECT_FALSE(EncodeId(c, &bytes).ok());
  c.host = "a b";
  EXPECT_FALSE(EncodeId(c, &bytes).ok());
  c.host = "h";
  c.port = 0;
  EXPECT_FALSE(EncodeId(c, &bytes).ok());
}

TEST(UniqueIdTest, EveryFlippedByteIsRefused) {
  IdContents c;
  c.host = "host-a.example";
  c.port = 29500;
  std::array<char, kIdBytes> good{};
  ASSERT_TRUE(EncodeId(c, &good).ok());
  for (size_t i = 0; i < kIdBytes; ++i) {
    std::array<char, kIdBytes> bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    Result<IdContents> d = DecodeId(bad);
    EXPECT_FALSE(d.ok()) << "byte " << i;
    if (!d.ok()) {
      EXPECT_NE(d.status().message().find("unique id"), std::string::npos);
    }
  }
  std::array<char, kIdBytes> zero{};
  EXPECT_FALSE(DecodeId(zero).ok());
}

// ncclGetUniqueId reads the process's configuration once: each case below runs in a
// forked child with its own environment, and this process never loads it.
int OneChild(const std::map<std::string, std::string>& env, const std::function<int()>& body) {
  chorus::testing::MultiProcOptions options;
  options.env = env;
  std::vector<chorus::testing::RankExit> exits = chorus::testing::RunRanks(
      1, [&](int) { return body(); }, options);
  return exits.size() == 1 && exits[0].exited ? exits[0].code : -1;
}

Result<IdContents> Decode(const ncclUniqueId& id) {
  std::array<char, kIdBytes> bytes{};
  std::memcpy(bytes.data(), id.internal, kIdBytes);
  return DecodeId(bytes);
}

TEST(UniqueIdTest, GetUniqueIdGivesDistinctDecodableIds) {
  EXPECT_EQ(OneChild({},
                     [] {
                       unsetenv("CHORUS_SOCKET_IFNAME");
                       ncclUniqueId a;
                       ncclUniqueId b;
                       RANK_CHECK(ncclGetUniqueId(&a) == ncclSuccess, ncclGetLastError(nullptr));
                       RANK_CHECK(ncclGetUniqueId(&b) == ncclSuccess, ncclGetLastError(nullptr));
                       RANK_CHECK(std::memcmp(a.internal, b.internal, kIdBytes) != 0, "two ids are equal");
                       Result<IdContents> d = Decode(a);
                       RANK_CHECK(d.ok(), d.status().ToString());
                       // No setting: the first non-loopback IPv4 that is up, else loopback.
                       RANK_CHECK(d.value().host == rendezvous::DefaultHostAddress(), d.value().host);
                       RANK_CHECK(ncclGetUniqueId(nullptr) == ncclInvalidArgument, "a NULL id was accepted");
                       return 0;
                     }),
            0);
}

// CHORUS_SOCKET_IFNAME=lo: the id carries 127.0.0.1 and a rank can meet through it.
TEST(UniqueIdTest, SocketIfnameLoopbackGivesLoopbackAddress) {
  EXPECT_EQ(OneChild({{"CHORUS_SOCKET_IFNAME", "lo"}},
                     [] {
                       ncclUniqueId id;
                       RANK_CHECK(ncclGetUniqueId(&id) == ncclSuccess, ncclGetLastError(nullptr));
                       Result<IdContents> d = Decode(id);
                       RANK_CHECK(d.ok(), d.status().ToString());
                       RANK_CHECK(d.value().host == "127.0.0.1", d.value().host);
                       ncclComm_t comm = nullptr;
                       RANK_CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, ncclGetLastError(nullptr));
                       RANK_CHECK(ncclCommDestroy(comm) == ncclSuccess, ncclGetLastError(nullptr));
                       return 0;
                     }),
            0);
}

// A name that matches no interface with an IPv4 address is refused, naming the setting.
TEST(UniqueIdTest, SocketIfnameWithoutSuchInterfaceIsClearError) {
  EXPECT_EQ(OneChild({{"CHORUS_SOCKET_IFNAME", "=nosuchif0"}},
                     [] {
                       ncclUniqueId id;
                       RANK_CHECK(ncclGetUniqueId(&id) == ncclInvalidArgument, "an id for a missing interface");
                       const std::string why = ncclGetLastError(nullptr);
                       RANK_CHECK(why.find("CHORUS_SOCKET_IFNAME='=nosuchif0'") != std::string::npos, why);
                       RANK_CHECK(why.find("lo=127.0.0.1") != std::string::npos, why);  // what is there
                       return 0;
                     }),
            0);
}

}  // namespace
}  // namespace chorus::nccl
