// Builds n transports in one process, one per rank, the way a communicator does: TCP
// over loopback (Listen, exchange addresses, Connect concurrently), RDMA on the first
// verbs device (Open, exchange addresses, Connect, Start concurrently) or shared memory
// (Create, exchange paths, Connect, Start).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tests/util/slowdown.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::transport::testing {

struct MeshOptions {
  // "uring", "epoll" (TCP), "rdma", "shm", "shm_rings" (no single copy), "shm_small_rings"
  // (no single copy, rings of kShmMinRingBytes)
  std::string engine = "uring";
  int nsockets = 2;
  int channels = 1;                // TCP channels (engines) each rank asks for
  std::vector<int> rank_channels;  // or per rank, where not empty (the mesh has the fewest)
  int64_t stripe_min_bytes = 256 << 10;
  int64_t timeout_ms = ::chorus::testing::Scaled(std::chrono::milliseconds(20000)).count();  // per request
  uint64_t comm_id = 42;
  uint64_t pause_above = 64 << 20;  // early bytes held from a peer before PAUSE (RESUME below a quarter)
  std::string shm_dir = "/dev/shm";
  bool lazy = false;                   // TCP: CHORUS_TCP_CONNECT=lazy
  int64_t connect_timeout_ms = 20000;  // TCP, lazy: a peer's sockets are made within this
};

Result<std::vector<std::unique_ptr<TcpTransport>>> MakeMesh(int n, const MeshOptions& o);
Result<std::vector<std::unique_ptr<RdmaTransport>>> MakeRdmaMesh(int n, const MeshOptions& o);
// Shared memory: every rank in this process, one host.
Result<std::vector<std::unique_ptr<ShmTransport>>> MakeShmMesh(int n, const MeshOptions& o);
// Either kind, by o.engine.
Result<std::vector<std::unique_ptr<Transport>>> MakeAnyMesh(int n, const MeshOptions& o);
// Why RDMA cannot run here ("" when a verbs device is usable): tests skip with it.
std::string RdmaUnavailableReason();

// Fills/checks a buffer with a pattern that depends on (seed, index).
void Fill(std::vector<char>* buf, uint32_t seed);
bool Check(const std::vector<char>& buf, uint32_t seed);

}  // namespace chorus::transport::testing
