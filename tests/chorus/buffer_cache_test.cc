// BufferCache: buffers come back for requests of about their size, the cap bounds what
// is kept, and concurrent users never share a buffer.
#include "common/buffer_cache.h"

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace chorus {
namespace {

TEST(BufferCacheTest, AReturnedBufferServesTheNextRequestOfItsSize) {
  BufferCache cache(1 << 20);
  char* first = nullptr;
  {
    BufferCache::Buffer b = cache.Get(4096);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), 4096u);
    std::memset(b.data(), 1, b.size());
    first = b.data();
  }
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  BufferCache::Buffer again = cache.Get(3000);  // within [size/2, size]: reused
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.size(), 4096u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(BufferCacheTest, ABufferMoreThanTwiceTheRequestIsNotHandedOut) {
  BufferCache cache(1 << 20);
  { BufferCache::Buffer big = cache.Get(8192); }
  BufferCache::Buffer small = cache.Get(1000);
  EXPECT_EQ(small.size(), 1000u);
  EXPECT_EQ(cache.misses(), 2u);
  EXPECT_EQ(cache.cached_bytes(), 8192u);  // still there for a request that fits
  BufferCache::Buffer fits = cache.Get(8000);
  EXPECT_EQ(fits.size(), 8192u);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(BufferCacheTest, TheSmallestFittingBufferIsTaken) {
  BufferCache cache(1 << 20);
  { BufferCache::Buffer a = cache.Get(6000), b = cache.Get(5000), c = cache.Get(7000); }
  BufferCache::Buffer got = cache.Get(4500);
  EXPECT_EQ(got.size(), 5000u);
}

TEST(BufferCacheTest, WhatExceedsTheCapIsFreed) {
  BufferCache cache(10000);
  {
    std::vector<BufferCache::Buffer> held;
    for (int i = 0; i < 5; ++i) held.push_back(cache.Get(4000));
  }
  EXPECT_EQ(cache.cached_bytes(), 8000u);  // two fit under 10000, three were freed
  BufferCache none(0);
  { BufferCache::Buffer b = none.Get(10); }
  EXPECT_EQ(none.cached_bytes(), 0u);
  BufferCache::Buffer b = none.Get(10);
  EXPECT_EQ(none.hits(), 0u);
  EXPECT_EQ(none.misses(), 2u);
}

TEST(BufferCacheTest, ZeroBytesStillGivesMemory) {
  BufferCache cache(100);
  BufferCache::Buffer b = cache.Get(0);
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 1u);
  BufferCache::Buffer u = TakeBuffer(nullptr, 0);
  EXPECT_NE(u.data(), nullptr);
}

TEST(BufferCacheTest, AMovedBufferGoesBackOnce) {
  BufferCache cache(1 << 20);
  BufferCache::Buffer a = cache.Get(4096);
  char* p = a.data();
  BufferCache::Buffer b = std::move(a);
  // The moved-from state is what this test checks.
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  EXPECT_EQ(a.size(), 0u);       // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  EXPECT_EQ(b.data(), p);
  BufferCache::Buffer c;
  c = std::move(b);
  b.Reset();  // NOLINT(bugprone-use-after-move): moved-from, returns nothing
  EXPECT_EQ(cache.cached_bytes(), 0u);
  c.Reset();
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  c.Reset();  // twice: still once
  EXPECT_EQ(cache.cached_bytes(), 4096u);
}

TEST(BufferCacheTest, UncachedBuffersAreFreedNotKept) {
  BufferCache::Buffer b = TakeBuffer(nullptr, 123);
  EXPECT_EQ(b.size(), 123u);
  std::memset(b.data(), 7, b.size());
  b.Reset();
  EXPECT_EQ(b.data(), nullptr);
}

// Four threads take and return buffers of random sizes, each filling what it holds with
// its own byte and checking it before returning it: a buffer handed to two holders at
// once would show the other's byte.
TEST(BufferCacheTest, ConcurrentUsersNeverShareABuffer) {
  BufferCache cache(1 << 20);
  constexpr int kThreads = 4, kRounds = 4000;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::vector<BufferCache::Buffer> held;
      for (int i = 0; i < kRounds; ++i) {
        const size_t bytes = 1 + rng() % 20000;
        BufferCache::Buffer b = cache.Get(bytes);
        if (b.size() < bytes) ++bad[t];
        std::memset(b.data(), 'a' + t, b.size());
        held.push_back(std::move(b));
        if (held.size() > 3 || rng() % 2 == 0) {
          BufferCache::Buffer& h = held.front();
          for (size_t k = 0; k < h.size(); ++k) {
            if (h.data()[k] != 'a' + t) {
              ++bad[t];
              break;
            }
          }
          held.erase(held.begin());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(cache.hits() + cache.misses(), static_cast<size_t>(kThreads * kRounds));
  EXPECT_GT(cache.hits(), 0u);
  EXPECT_LE(cache.cached_bytes(), cache.cap_bytes());
}

}  // namespace
}  // namespace chorus
