// SHA-256 against the FIPS 180-2 examples, HMAC-SHA256 against RFC 4231, and the
// secret file's checks.
#include "common/job_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace chorus {
namespace {

std::string Hex(const Sha256Digest& d) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

std::string Unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

TEST(Sha256Test, Fips180Examples) {
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256(std::string(1000000, 'a'))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, EveryLengthAroundTheBlockBoundary) {
  // The padding takes a second block from 56 bytes on (reference digests: Python hashlib).
  EXPECT_EQ(Hex(Sha256(std::string(55, 'a'))), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Hex(Sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Hex(Sha256(std::string(64, 'a'))), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

struct HmacCase {
  std::string key, data, mac;
};

TEST(HmacSha256Test, Rfc4231) {
  const HmacCase cases[] = {
      {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {Unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
       "hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const HmacCase& c : cases) EXPECT_EQ(Hex(HmacSha256(c.key, c.data)), c.mac) << c.data;
  // Case 5: truncated to 128 bits.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0c'), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
}

TEST(JobSecretTest, MacsBindEveryPartAndTheLabel) {
  JobSecret s("correct horse"), other("battery staple");
  const Sha256Digest m = s.Mac("store-client", {"ab", "c"});
  EXPECT_TRUE(s.Verify(m.data(), "store-client", {"ab", "c"}));
  EXPECT_FALSE(s.Verify(m.data(), "store-server", {"ab", "c"}));
  EXPECT_FALSE(s.Verify(m.data(), "store-client", {"a", "bc"}));  // length-prefixed: no ambiguity
  EXPECT_FALSE(other.Verify(m.data(), "store-client", {"ab", "c"}));
  EXPECT_TRUE(JobSecret().empty());
  EXPECT_FALSE(s.empty());
}

TEST(JobSecretTest, ConstantTimeEqualAndNonces) {
  const uint8_t a[3] = {1, 2, 3}, b[3] = {1, 2, 4};
  EXPECT_TRUE(ConstantTimeEqual(a, a, 3));
  EXPECT_FALSE(ConstantTimeEqual(a, b, 3));
  Result<Nonce> n1 = NewNonce(), n2 = NewNonce();
  ASSERT_TRUE(n1.ok() && n2.ok()) << n1.status().message();
  EXPECT_NE(n1.value(), n2.value());
}

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/secret_" + std::to_string(getpid());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& text, mode_t mode) {
    std::remove(path_.c_str());
    std::ofstream(path_) << text;
    ASSERT_EQ(chmod(path_.c_str(), mode), 0);
  }
  std::string path_;
};

TEST_F(SecretFileTest, OwnerOnlyFileIsReadWithoutItsNewline) {
  Write("s3cret\n", 0600);
  Result<JobSecret> s = ReadSecretFile(path_);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s.value().Verify(JobSecret("s3cret").Mac("x", {}).data(), "x", {}));
}

TEST_F(SecretFileTest, GroupOrOtherReadableFileIsRefusedNamingTheFix) {
  Write("s3cret", 0644);
  Result<JobSecret> s = ReadSecretFile(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("mode 644"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("chmod 600"), std::string::npos) << s.status().message();
  Write("s3cret", 0640);
  EXPECT_FALSE(ReadSecretFile(path_).ok());
}

TEST_F(SecretFileTest, EmptyOrMissingFileIsRefused) {
  Write("\n", 0600);
  EXPECT_FALSE(ReadSecretFile(path_).ok());
  EXPECT_FALSE(ReadSecretFile(path_ + ".none").ok());
}

}  // namespace
}  // namespace chorus
