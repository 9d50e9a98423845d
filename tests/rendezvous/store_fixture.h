// What the rendezvous tests share: a store server on loopback per test, clients of it,
// and ranks played by threads.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

namespace chorus::rendezvous {

// Runs body(rank) on `n` threads and collects the statuses, by rank.
inline std::vector<Status> RunRanks(int n, const std::function<Status(int)>& body) {
  std::vector<Status> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = body(r); });
  for (auto& t : threads) t.join();
  return out;
}

// A fresh store server on 127.0.0.1 for each test.
class StoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s.value());
  }
  // A client of the test's server; null (and the test failed) where it cannot connect.
  std::unique_ptr<StoreClient> Client() {
    auto c = StoreClient::Connect("127.0.0.1", server_->port(), Deadline::AfterMs(10000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c.value()) : nullptr;
  }
  std::unique_ptr<StoreServer> server_;
};

}  // namespace chorus::rendezvous
