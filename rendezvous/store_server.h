// The rendezvous key-value store's server: one thread, epoll, non-blocking sockets,
// any number of clients. GET/WAIT/MULTI_GET requests whose keys are missing are
// parked (not polled) and answered when the keys appear or when their own
// server-side timeout passes (TIMEOUT naming the missing keys). A client that sends
// garbage gets an ERROR reply where possible and is disconnected; the server keeps
// serving everyone else. Every client first authenticates (store_protocol.h): until
// then it is read one fixed-size frame and nothing else. See store_protocol.h for the
// wire format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::rendezvous {

class StoreServer {
 public:
  // Listens on `bind_host` ("" = every interface, IPv6 dual-stack where available)
  // and `port` (0 = ephemeral), with SO_REUSEADDR. When the port is taken by another
  // socket the error has code kUnavailable (Join relies on it to detect an external
  // store); other failures are kIoError. With a `secret`, only clients that prove
  // they know it are served (store_protocol.h); without, clients that have one are refused.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& bind_host, uint16_t port,
                                                    JobSecret secret = JobSecret());
  // Stops the thread and closes every socket; parked clients see the connection close.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const { return port_; }

  // Closes the listening socket; connected clients are served on. Once every rank
  // has connected, this frees the port for the next store (a communicator created
  // right after this one is destroyed) before this store goes.
  void StopAccepting();

  class Loop;  // the epoll loop (store_server.cc)

 private:
  StoreServer() = default;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  uint16_t port_ = 0;
};

}  // namespace chorus::rendezvous
