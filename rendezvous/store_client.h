// Client of the rendezvous key-value store (store_server.h). One TCP connection,
// one request at a time (a mutex serialises callers: thread-safe). Every call is
// bounded: waiting ops by their own timeout plus the I/O timeout, the others by the
// I/O timeout, so a dead or wedged server is an error, never a hang. After an I/O or
// protocol error the connection is unusable and every later call says why.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "rendezvous/socket_io.h"
#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"

namespace chorus::rendezvous {

class StoreClient : public Store {
 public:
  // Connects to host:port, retrying refused/unreachable connections until `deadline`
  // (the server may not be up yet), then authenticates (store_protocol.h): with a
  // `secret` both sides prove they know it; a secret on one side only, or another
  // one, is an error at once (kMismatch) saying which.
  static Result<std::unique_ptr<StoreClient>> Connect(const std::string& host, uint16_t port, Deadline deadline,
                                                      const JobSecret& secret = JobSecret());

  Status Set(const std::string& key, std::string value) override;
  // Waits up to `timeout` for the key to exist; a timeout error names the key.
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Waits up to `timeout` for all keys; a timeout error names the missing ones.
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Wait, then the values in the order of `keys`, in one round trip.
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  // Atomically adds `delta` to the integer at `key` (absent = 0); returns the new value.
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  // Sets `key` to `desired` if it holds `expected` (absent counts as ""); returns the
  // value held afterwards ("" when absent): `desired` exactly when the swap happened
  // (or when it already held `desired`).
  Result<std::string> CompareSet(const std::string& key, const std::string& expected, const std::string& desired);
  // Returns whether the key existed.
  Result<bool> Delete(const std::string& key);
  // Non-blocking: are all keys present?
  Result<bool> Check(const std::vector<std::string>& keys) override;
  Status Ping();

  // How long any request may wait for the server beyond its own timeout (default 60 s).
  void set_io_timeout(std::chrono::milliseconds timeout);
  // "host:port" of the store, for messages.
  const std::string& address() const { return address_; }

 private:
  StoreClient(UniqueFd fd, std::string address) : fd_(std::move(fd)), address_(std::move(address)) {}
  // Sends one request and reads its reply. `server_wait` is how long the server
  // itself may hold the request (GET/WAIT timeouts).
  Result<StoreReply> Call(const StoreRequest& request, std::chrono::milliseconds server_wait);
  Result<StoreReply> CallLocked(const StoreRequest& request, Deadline deadline);
  Status Authenticate(const JobSecret& secret, Deadline deadline);
  // Reads one frame of at most `max_length` (its length field) into `*frame`.
  Status ReadFrame(uint32_t max_length, Deadline deadline, uint8_t* opcode, std::string* payload);

  std::mutex mu_;
  UniqueFd fd_;
  std::string address_;
  std::string inbuf_;
  Status broken_;  // the error that made the connection unusable
  std::chrono::milliseconds io_timeout_{60 * 1000};
};

}  // namespace chorus::rendezvous
