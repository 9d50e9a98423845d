#include "common/status.h"

#include <cstring>

namespace chorus {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kPeerFailed: return "PEER_FAILED";
    case StatusCode::kMismatch: return "MISMATCH";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kProtocolError: return "PROTOCOL_ERROR";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status IoError(const std::string& what, int err) {
  return Status(StatusCode::kIoError, what + ": " + std::strerror(err));
}

}  // namespace chorus
