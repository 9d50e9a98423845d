// What an ncclUniqueId carries for chorus: where the rendezvous store of the job listens
// (started by ncclGetUniqueId in the calling process) and a random nonce, in NCCL's 128
// bytes, with a magic, a format version and a checksum so that a corrupt id is refused
// rather than dialled. Layout: docs/design/nccl_api.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::nccl {

constexpr size_t kIdBytes = 128;
constexpr size_t kMaxIdHost = 64;  // longest host text an id holds

struct IdContents {
  std::string host;  // numeric address or name of the store's host
  uint16_t port = 0;
  Nonce nonce{};
};

// Fails (kInvalidArgument) where the host is empty, longer than kMaxIdHost or has
// bytes other than printable ASCII, or the port is 0.
Status EncodeId(const IdContents& c, std::array<char, kIdBytes>* out);
// Checks magic, version, checksum, field ranges and that the padding is zero.
Result<IdContents> DecodeId(const std::array<char, kIdBytes>& in);

}  // namespace chorus::nccl
