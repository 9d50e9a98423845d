// The job secret and the little cryptography that proves it: SHA-256 (FIPS 180-4),
// HMAC-SHA256 (RFC 2104), a constant-time compare and nonces from getrandom().
// Written here rather than taken from OpenSSL so that libchorus gains no runtime
// dependency. Only used for challenge-response: no encryption (docs/design/job_secret.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/status.h"

namespace chorus {

using Sha256Digest = std::array<uint8_t, 32>;
// Nonces are 128 bits: a repeat within a job's lifetime is out of reach.
using Nonce = std::array<uint8_t, 16>;

Sha256Digest Sha256(std::string_view data);
Sha256Digest HmacSha256(std::string_view key, std::string_view message);
// Compares in time that depends only on the length, so a MAC cannot be guessed byte by byte.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);
// A fresh random nonce from the kernel (getrandom); an error where it has no entropy source.
Result<Nonce> NewNonce();
inline std::string_view View(const Nonce& n) { return {reinterpret_cast<const char*>(n.data()), n.size()}; }

// The secret every process of a job shares (CHORUS_SECRET / CHORUS_SECRET_FILE). Its
// bytes are never printed: there is no accessor and no stream operator.
class JobSecret {
 public:
  JobSecret() = default;
  explicit JobSecret(std::string bytes) : key_(std::move(bytes)) {}
  bool empty() const { return key_.empty(); }
  // HMAC-SHA256 under the secret of `label` and `parts`, each length-prefixed so that
  // no two different lists encode alike.
  Sha256Digest Mac(std::string_view label, std::initializer_list<std::string_view> parts) const;
  // Whether `mac` (32 bytes) is Mac(label, parts), compared in constant time.
  bool Verify(const uint8_t* mac, std::string_view label, std::initializer_list<std::string_view> parts) const;

 private:
  std::string key_;
};

// A fresh random secret as 64 hex digits (256 bits), for a launcher to hand its ranks.
Result<std::string> NewSecretText();

// Reads a secret file for CHORUS_SECRET_FILE: refuses one that group or others may
// read (the secret would be no secret on a shared machine) or that is empty; one
// trailing newline is dropped. Errors name the path and, for the mode, the fix.
Result<JobSecret> ReadSecretFile(const std::string& path);

}  // namespace chorus
