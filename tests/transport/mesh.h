// Builds n TcpTransports in one process, connected over loopback, one per rank, the
// way a communicator does (Listen, exchange addresses, Connect concurrently).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chorus/status.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport::testing {

struct MeshOptions {
  std::string engine = "uring";
  int nsockets = 2;
  int64_t stripe_min_bytes = 256 << 10;
  int64_t timeout_ms = 20000;
  uint64_t comm_id = 42;
};

Result<std::vector<std::unique_ptr<TcpTransport>>> MakeMesh(int n, const MeshOptions& o);

// Fills/checks a buffer with a pattern that depends on (seed, index).
void Fill(std::vector<char>* buf, uint32_t seed);
bool Check(const std::vector<char>& buf, uint32_t seed);

}  // namespace chorus::transport::testing
