#include "torch_chorus/csrc/torch_store.h"

#include <algorithm>
#include <thread>

namespace torch_chorus {
namespace {

// The longest pause between two polls of a missing key.
constexpr std::chrono::milliseconds kMaxPollPause(10);

chorus::Status StoreError(const std::string& what, const std::exception& e) {
  return chorus::PeerFailed("torch's store: " + what + " failed: " + e.what());
}

std::string Quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

}  // namespace

chorus::Status TorchStore::Set(const std::string& key, std::string value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return chorus::Status::Ok();
  } catch (const std::exception& e) {
    return StoreError("set '" + key + "'", e);
  }
}

chorus::Status TorchStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds pause(1);
  for (;;) {
    try {
      if (store_->check(keys)) return chorus::Status::Ok();
    } catch (const std::exception& e) {
      return StoreError("waiting for " + Quoted(keys), e);
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPollPause);
  }
  std::vector<std::string> missing;
  try {
    for (const std::string& k : keys) {
      if (!store_->check({k})) missing.push_back(k);
    }
  } catch (const std::exception& e) {
    return StoreError("waiting for " + Quoted(keys), e);
  }
  if (missing.empty()) return chorus::Status::Ok();  // set just now
  return chorus::TimeoutError("torch's store: " + Quoted(missing) + " not set within " +
                              std::to_string(timeout.count()) + " ms");
}

chorus::Result<std::string> TorchStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  CHORUS_RETURN_IF_ERROR(Wait({key}, timeout));
  try {
    std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    return StoreError("get '" + key + "'", e);
  }
}

chorus::Result<std::vector<std::string>> TorchStore::MultiGet(const std::vector<std::string>& keys,
                                                              std::chrono::milliseconds timeout) {
  CHORUS_RETURN_IF_ERROR(Wait(keys, timeout));
  std::vector<std::string> values;
  values.reserve(keys.size());
  try {
    for (const std::string& k : keys) {
      std::vector<uint8_t> v = store_->get(k);
      values.emplace_back(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    return StoreError("get " + Quoted(keys), e);
  }
  return values;
}

chorus::Result<int64_t> TorchStore::Add(const std::string& key, int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (const std::exception& e) {
    return StoreError("add '" + key + "'", e);
  }
}

chorus::Result<bool> TorchStore::Check(const std::vector<std::string>& keys) {
  try {
    return store_->check(keys);
  } catch (const std::exception& e) {
    return StoreError("check " + Quoted(keys), e);
  }
}

}  // namespace torch_chorus
