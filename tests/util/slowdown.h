// Test deadlines that allow for a slower build: under a sanitizer the same work runs
// several times slower, and a deadline meant to catch a hang must not fail a test that
// is merely instrumented. Scale only waits expected to succeed; a wait expected to time
// out keeps its short deadline.
#pragma once

#include <chrono>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHORUS_TEST_TSAN 1
#endif
#if __has_feature(address_sanitizer)
#define CHORUS_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CHORUS_TEST_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CHORUS_TEST_ASAN 1
#endif

namespace chorus::testing {

// How many times slower than a plain build this one runs, at most.
#if defined(CHORUS_TEST_TSAN)
inline constexpr int kSlowdown = 10;
#elif defined(CHORUS_TEST_ASAN)
inline constexpr int kSlowdown = 3;
#else
inline constexpr int kSlowdown = 1;
#endif

template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> Scaled(std::chrono::duration<Rep, Period> d) {
  return d * kSlowdown;
}

}  // namespace chorus::testing
