// rendezvous::Store over torch's c10d::Store: a chorus communicator created by
// torch_chorus meets its peers in the store torch hands the backend (a PrefixStore per
// group), so it opens no port of its own and follows torch's init method.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "rendezvous/store.h"

namespace torch_chorus {

class TorchStore : public chorus::rendezvous::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  chorus::Status Set(const std::string& key, std::string value) override;
  chorus::Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  chorus::Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    std::chrono::milliseconds timeout) override;
  chorus::Result<int64_t> Add(const std::string& key, int64_t delta) override;
  chorus::Result<bool> Check(const std::vector<std::string>& keys) override;

 private:
  // Waits for `keys` by polling check(), never torch's wait(): a timed-out wait on
  // 1.13's TCPStore leaves its reply pending on the socket (to answer the next request)
  // and the socket's timeout shortened. A timeout names the keys still missing.
  chorus::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace torch_chorus
