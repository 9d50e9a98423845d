#include "common/job_secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/unique_fd.h"

namespace chorus {
namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// Incremental SHA-256, so that HMAC hashes key pad and message without concatenating.
class Sha256State {
 public:
  void Update(std::string_view data) {
    for (char ch : data) {
      block_[fill_++] = static_cast<uint8_t>(ch);
      if (fill_ == 64) {
        Compress();
        fill_ = 0;
      }
    }
    bits_ += uint64_t{data.size()} * 8;
  }
  Sha256Digest Finish() {
    const uint64_t bits = bits_;
    block_[fill_++] = 0x80;
    if (fill_ > 56) {
      while (fill_ < 64) block_[fill_++] = 0;
      Compress();
      fill_ = 0;
    }
    while (fill_ < 56) block_[fill_++] = 0;
    for (int i = 7; i >= 0; --i) block_[fill_++] = static_cast<uint8_t>(bits >> (8 * i));
    Compress();
    Sha256Digest out;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
    }
    return out;
  }

 private:
  void Compress() {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t{block_[4 * i]} << 24 | uint32_t{block_[4 * i + 1]} << 16 | uint32_t{block_[4 * i + 2]} << 8 |
             uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t fill_ = 0;
  uint64_t bits_ = 0;
};

std::string_view View(const Sha256Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

}  // namespace

Sha256Digest Sha256(std::string_view data) {
  Sha256State s;
  s.Update(data);
  return s.Finish();
}

Sha256Digest HmacSha256(std::string_view key, std::string_view message) {
  uint8_t k[64] = {};
  if (key.size() > 64) {
    const Sha256Digest d = Sha256(key);
    std::memcpy(k, d.data(), d.size());
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  char ipad[64], opad[64];
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256State inner;
  inner.Update({ipad, 64});
  inner.Update(message);
  const Sha256Digest ih = inner.Finish();
  Sha256State outer;
  outer.Update({opad, 64});
  outer.Update(View(ih));
  return outer.Finish();
}

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

Result<Nonce> NewNonce() {
  Nonce n;
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoError("getrandom (a nonce for the job-secret handshake)", errno);
    }
    got += static_cast<size_t>(r);
  }
  return n;
}

Result<std::string> NewSecretText() {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 2; ++i) {
    Result<Nonce> n = NewNonce();
    if (!n.ok()) return n.status();
    for (uint8_t b : n.value()) {
      s.push_back(kDigits[b >> 4]);
      s.push_back(kDigits[b & 15]);
    }
  }
  return s;
}

Sha256Digest JobSecret::Mac(std::string_view label, std::initializer_list<std::string_view> parts) const {
  std::string msg;
  auto put = [&msg](std::string_view s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) msg.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    msg.append(s.data(), s.size());
  };
  put(label);
  for (std::string_view p : parts) put(p);
  return HmacSha256(key_, msg);
}

bool JobSecret::Verify(const uint8_t* mac, std::string_view label,
                       std::initializer_list<std::string_view> parts) const {
  const Sha256Digest want = Mac(label, parts);
  return ConstantTimeEqual(mac, want.data(), want.size());
}

Result<JobSecret> ReadSecretFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return IoError("CHORUS_SECRET_FILE: cannot open " + path, errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return IoError("CHORUS_SECRET_FILE: cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument("CHORUS_SECRET_FILE=" + path + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return InvalidArgument("CHORUS_SECRET_FILE=" + path + " has mode " + mode +
                           ": group or others may access it, so it is no secret (chmod 600 " + path + ")");
  }
  constexpr size_t kMaxSecretBytes = 64 << 10;
  std::string bytes;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("CHORUS_SECRET_FILE: cannot read " + path, errno);
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > kMaxSecretBytes) {
      return InvalidArgument("CHORUS_SECRET_FILE=" + path + " is larger than 64 KiB; a secret is a short text");
    }
  }
  if (!bytes.empty() && bytes.back() == '\n') bytes.pop_back();
  if (!bytes.empty() && bytes.back() == '\r') bytes.pop_back();
  if (bytes.empty()) return InvalidArgument("CHORUS_SECRET_FILE=" + path + " is empty");
  return JobSecret(std::move(bytes));
}

}  // namespace chorus
