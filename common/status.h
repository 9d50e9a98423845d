// Typed statuses for every fallible call in chorus. No exceptions cross the API:
// a call returns Status (or Result<T>), whose message names what was wrong
// (rank, peer, host, size, dtype, variable).
#pragma once

#include <string>
#include <utility>

namespace chorus {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // caller passed something wrong (size, rank, dtype, env value)
  kTimeout,          // a deadline passed
  kPeerFailed,       // a peer closed, vanished or reported an abort
  kMismatch,         // ranks called different operations / sizes
  kIoError,          // a system call failed
  kProtocolError,    // bytes on the wire were not what the protocol allows
  kUnavailable,      // a feature or device is not present here (no GPU, no verbs)
  kAborted,          // the communicator was aborted or shut down
  kInternal,         // a bug in chorus
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status TimeoutError(std::string m) { return Status(StatusCode::kTimeout, std::move(m)); }
inline Status PeerFailed(std::string m) { return Status(StatusCode::kPeerFailed, std::move(m)); }
inline Status MismatchError(std::string m) { return Status(StatusCode::kMismatch, std::move(m)); }
inline Status ProtocolError(std::string m) { return Status(StatusCode::kProtocolError, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
// An I/O error built from errno: "what: strerror(err)".
Status IoError(const std::string& what, int err);

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }
  const T& value() const& { return value_; }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace chorus

#define CHORUS_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::chorus::Status _chorus_st = (expr);    \
    if (!_chorus_st.ok()) return _chorus_st; \
  } while (0)
