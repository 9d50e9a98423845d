// A Request made of parts posted separately (one message cut into pieces that travel
// on different lanes): finished once every part is, with the first part's error.
#pragma once

#include <utility>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport {

class PartsRequest final : public Request {
 public:
  explicit PartsRequest(std::vector<RequestPtr> parts) : parts_(std::move(parts)) {}

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
    for (const RequestPtr& p : parts_) {
      Status st = p->Wait(deadline);
      if (!st.ok() && !p->Test()) return st;
    }
    return status();
  }
  Status status() override {
    for (const RequestPtr& p : parts_) {
      Status st = p->status();
      if (!st.ok()) return st;
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
  const std::vector<RequestPtr> parts_;
};

}  // namespace chorus::transport
