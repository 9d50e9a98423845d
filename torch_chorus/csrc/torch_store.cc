#include "torch_chorus/csrc/torch_store.h"

namespace torch_chorus {
namespace {

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
  try {
    // torch reads a zero timeout as "no timeout".
    store_->wait(keys, std::max(timeout, std::chrono::milliseconds(1)));
    return chorus::Status::Ok();
  } catch (const std::exception& e) {
    std::vector<std::string> missing;
    try {
      for (const std::string& k : keys) {
        if (!store_->check({k})) missing.push_back(k);
      }
    } catch (const std::exception&) {
      return StoreError("waiting for " + Quoted(keys), e);
    }
    if (missing.empty()) return StoreError("waiting for " + Quoted(keys), e);
    return chorus::TimeoutError("torch's store: " + Quoted(missing) + " not set within " +
                                std::to_string(timeout.count()) + " ms");
  }
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
