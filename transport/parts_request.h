// A Request made of parts posted separately (one message cut into pieces that travel
// on different channels): finished once every part is, with the first part's error.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport {

class PartsRequest final : public Request {
 public:
  // `bytes`: the whole message's, for error messages.
  PartsRequest(std::vector<RequestPtr> parts, size_t bytes) : parts_(std::move(parts)), bytes_(bytes) {}

  bool Test() override {
    for (const RequestPtr& p : parts_) {
      if (!p->Test()) return false;
    }
    return true;
  }
  // Waits for every part, even after one failed: a finished request no longer touches
  // its buffer, and the other parts write into the same one. A deadline returns at
  // once (the caller aborts the transport, as for any request).
  Status Wait(Deadline deadline) override {
    for (size_t k = 0; k < parts_.size(); ++k) {
      Status st = parts_[k]->Wait(deadline);
      if (!st.ok() && !parts_[k]->Test()) return st.WithContext(PartOf(k));
    }
    return status();
  }
  Status status() override {
    for (size_t k = 0; k < parts_.size(); ++k) {
      Status st = parts_[k]->status();
      if (!st.ok()) return st.WithContext(PartOf(k));
    }
    return Status::Ok();
  }
  uint64_t remote_fingerprint() override {
    for (const RequestPtr& p : parts_) {
      if (uint64_t fp = p->remote_fingerprint(); fp != 0) return fp;
    }
    return 0;
  }

 private:
  std::string PartOf(size_t k) const {
    return "part " + std::to_string(k + 1) + " of " + std::to_string(parts_.size()) + " of a " +
           std::to_string(bytes_) + "-byte message";
  }

  const std::vector<RequestPtr> parts_;
  const size_t bytes_;
};

}  // namespace chorus::transport
