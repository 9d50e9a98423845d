// What the bootstrap needs of a key-value store: chorus's own TCP store
// (store_client.h) or one the application brings, such as torch's c10d::Store
// (torch_chorus adapts it), so that a communicator can meet its peers without
// opening a port of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  virtual Status Set(const std::string& key, std::string value) = 0;
  // Waits up to `timeout` for the key to exist; a timeout error names the key ('key').
  virtual Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits up to `timeout` for all keys, then their values in the order of `keys`; a
  // timeout error names the missing ones.
  virtual Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (absent = 0); returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Non-blocking: are all keys present?
  virtual Result<bool> Check(const std::vector<std::string>& keys) = 0;
};

}  // namespace chorus::rendezvous
