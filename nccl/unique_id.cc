#include "nccl/unique_id.h"

#include <cstring>

namespace chorus::nccl {
namespace {

// Offsets of the fields (docs/design/nccl_api.md).
constexpr char kMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'I', 'D'};
constexpr uint8_t kFormat = 1;
constexpr size_t kFormatAt = 8;
constexpr size_t kPortAt = 10;
constexpr size_t kNonceAt = 12;
constexpr size_t kHostLenAt = 28;
constexpr size_t kHostAt = 29;
constexpr size_t kChecksumAt = kIdBytes - 4;

// FNV-1a over everything before the checksum: catches truncation and stray writes.
uint32_t Checksum(const std::array<char, kIdBytes>& b) {
  uint32_t h = 2166136261U;
  for (size_t i = 0; i < kChecksumAt; ++i) {
    h ^= static_cast<uint8_t>(b[i]);
    h *= 16777619U;
  }
  return h;
}

bool Printable(char c) { return c > 0x20 && c < 0x7f; }

}  // namespace

Status EncodeId(const IdContents& c, std::array<char, kIdBytes>* out) {
  if (c.host.empty() || c.host.size() > kMaxIdHost) {
    return InvalidArgument("unique id: store host '" + c.host + "' must have 1-" + std::to_string(kMaxIdHost) +
                           " characters");
  }
  for (char ch : c.host) {
    if (!Printable(ch)) return InvalidArgument("unique id: store host '" + c.host + "' has a non-printable byte");
  }
  if (c.port == 0) return InvalidArgument("unique id: store port 0");
  out->fill(0);
  std::memcpy(out->data(), kMagic, sizeof(kMagic));
  (*out)[kFormatAt] = static_cast<char>(kFormat);
  (*out)[kPortAt] = static_cast<char>(c.port >> 8);
  (*out)[kPortAt + 1] = static_cast<char>(c.port & 0xff);
  std::memcpy(out->data() + kNonceAt, c.nonce.data(), c.nonce.size());
  (*out)[kHostLenAt] = static_cast<char>(c.host.size());
  std::memcpy(out->data() + kHostAt, c.host.data(), c.host.size());
  const uint32_t sum = Checksum(*out);
  for (int i = 0; i < 4; ++i) (*out)[kChecksumAt + i] = static_cast<char>((sum >> (24 - 8 * i)) & 0xff);
  return Status::Ok();
}

Result<IdContents> DecodeId(const std::array<char, kIdBytes>& in) {
  const std::string bad = "unique id is not one from chorus's ncclGetUniqueId: ";
  if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) return InvalidArgument(bad + "wrong magic");
  if (static_cast<uint8_t>(in[kFormatAt]) != kFormat) {
    return InvalidArgument(bad + "format " + std::to_string(static_cast<uint8_t>(in[kFormatAt])) + ", expected " +
                           std::to_string(kFormat));
  }
  uint32_t sum = 0;
  for (int i = 0; i < 4; ++i) sum = (sum << 8) | static_cast<uint8_t>(in[kChecksumAt + i]);
  if (sum != Checksum(in)) return InvalidArgument(bad + "checksum mismatch (corrupted or truncated)");
  IdContents c;
  c.port = static_cast<uint16_t>((static_cast<uint8_t>(in[kPortAt]) << 8) | static_cast<uint8_t>(in[kPortAt + 1]));
  if (c.port == 0) return InvalidArgument(bad + "port 0");
  const size_t len = static_cast<uint8_t>(in[kHostLenAt]);
  if (len == 0 || len > kMaxIdHost) return InvalidArgument(bad + "host length " + std::to_string(len));
  c.host.assign(in.data() + kHostAt, len);
  for (char ch : c.host) {
    if (!Printable(ch)) return InvalidArgument(bad + "host has a non-printable byte");
  }
  for (size_t i = kHostAt + len; i < kChecksumAt; ++i) {
    if (in[i] != 0) return InvalidArgument(bad + "non-zero padding at byte " + std::to_string(i));
  }
  if (in[kFormatAt + 1] != 0) return InvalidArgument(bad + "non-zero reserved byte 9");
  std::memcpy(c.nonce.data(), in.data() + kNonceAt, c.nonce.size());
  return c;
}

}  // namespace chorus::nccl
