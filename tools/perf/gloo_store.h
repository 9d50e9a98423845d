// gloo's rendezvous Store over chorus's own key-value store (rendezvous/): rank 0
// serves it at MASTER_ADDR:MASTER_PORT, every rank is a client. Unlike gloo's
// FileStore it needs no shared directory and works across namespaces and hosts.
// gloo's Store interface has no status, so errors are thrown as gloo::IoException
// carrying chorus's message (address, key, timeout).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "common/status.h"
#include "rendezvous/store_client.h"

namespace chorus::perf {

class GlooStore : public ::gloo::rendezvous::Store {
 public:
  // Connects, retrying until `timeout` passes (rank 0 may start its server later).
  static Result<std::unique_ptr<GlooStore>> Connect(const std::string& host, int port,
                                                    std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  GlooStore(std::unique_ptr<rendezvous::StoreClient> client, std::chrono::milliseconds timeout)
      : client_(std::move(client)), timeout_(timeout) {}

  std::unique_ptr<rendezvous::StoreClient> client_;
  std::chrono::milliseconds timeout_;
};

}  // namespace chorus::perf
