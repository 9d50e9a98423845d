// A minimal key-value store over TCP for gloo's rendezvous: rank 0 serves it at
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 included) is a client. Unlike gloo's
// FileStore it needs no shared directory and leaves no stale keys between runs, and it
// works across network namespaces and hosts. Every wait has a deadline.
//
// Wire format, both ways: u8 command ('S' set, 'G' get), u32 key length, key,
// [u32 value length, value] for 'S'. A 'G' blocks on the server until the key exists,
// then the answer is u32 length + value.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "chorus/status.h"

namespace chorus {
namespace perf {

class KvServer {
 public:
  KvServer() = default;
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  // Listens on every address at `port` (0: any free port, see port()).
  Status Start(int port);
  int port() const { return port_; }
  void Stop();

 private:
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
  std::vector<int> client_fds_;
  std::vector<std::thread> clients_;
};

// gloo::rendezvous::Store over a KvServer. Errors are thrown as gloo::IoException (the
// Store interface has no status), with the address and key named.
class TcpKvStore : public ::gloo::rendezvous::Store {
 public:
  ~TcpKvStore() override;
  // Connects, retrying until `timeout` passes (the server may start later).
  static Result<std::unique_ptr<TcpKvStore>> Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  TcpKvStore(int fd, std::string where, std::chrono::milliseconds timeout)
      : fd_(fd), where_(std::move(where)), timeout_(timeout) {}
  std::vector<char> GetWithTimeout(const std::string& key, std::chrono::milliseconds timeout);

  std::mutex mu_;  // one request at a time on the socket
  int fd_;
  std::string where_;
  std::chrono::milliseconds timeout_;
};

}  // namespace perf
}  // namespace chorus
