#include "nccl/unique_id.h"

#include <gtest/gtest.h>

#include <cstring>

#include "nccl/nccl.h"

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

TEST(UniqueIdTest, GetUniqueIdGivesDistinctDecodableIds) {
  ncclUniqueId a;
  ncclUniqueId b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess) << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_NE(std::memcmp(a.internal, b.internal, kIdBytes), 0);
  std::array<char, kIdBytes> bytes{};
  std::memcpy(bytes.data(), a.internal, kIdBytes);
  EXPECT_TRUE(DecodeId(bytes).ok());
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
}

}  // namespace
}  // namespace chorus::nccl
