// libFuzzer target: the bootstrap's peer record parser on arbitrary text. A record
// that parses must serialize to one that parses to the same record; anything else
// must be a Status. Built by tools/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rendezvous/bootstrap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using chorus::rendezvous::PeerInfo;
  chorus::Result<PeerInfo> info = PeerInfo::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!info.ok()) return 0;
  std::string text = info.value().Serialize();
  chorus::Result<PeerInfo> again = PeerInfo::Parse(text);
  if (!again.ok() || again.value().Serialize() != text) std::abort();
  return 0;
}
