#include "tests/algos/tcp_world.h"

#include <unistd.h>

#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus::testing {

Result<std::unique_ptr<TcpWorld>> TcpWorld::Create(int n, size_t scratch_cache_bytes,
                                                   const transport::TcpOptions& base) {
  std::unique_ptr<TcpWorld> world(new TcpWorld());
  for (int r = 0; r < n; ++r) world->scratch_.push_back(std::make_unique<BufferCache>(scratch_cache_bytes));
  // A fresh communicator id per world, so a stray connection from another test's
  // world is rejected by the handshake instead of mixing streams.
  const uint64_t comm_id = std::random_device()() * uint64_t{0x9e3779b97f4a7c15} + static_cast<uint64_t>(n);
  std::vector<std::unique_ptr<transport::TcpTransport>> tcp;
  std::vector<transport::PeerAddress> addresses;
  for (int r = 0; r < n; ++r) {
    transport::TcpOptions opts = base;
    opts.bind_address = "127.0.0.1";
    Result<std::unique_ptr<transport::TcpTransport>> t = transport::TcpTransport::Listen(r, n, comm_id, opts);
    if (!t.ok()) return t.status().WithContext("rank " + std::to_string(r) + " listen");
    addresses.push_back({t.value()->address(), "localhost"});
    tcp.push_back(std::move(t.value()));
  }
  // Every rank connects at once: the mesh only completes when all of them take part.
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  const Deadline deadline = Deadline::AfterMs(20000);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { st[r] = tcp[r]->Connect(addresses, deadline); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!st[r].ok()) return st[r].WithContext("rank " + std::to_string(r) + " connect");
  }
  for (auto& t : tcp) world->transports_.push_back(std::move(t));
  return world;
}

Result<std::unique_ptr<TcpWorld>> TcpWorld::CreateShm(int n, size_t scratch_cache_bytes, bool single_copy) {
  std::unique_ptr<TcpWorld> world(new TcpWorld());
  for (int r = 0; r < n; ++r) world->scratch_.push_back(std::make_unique<BufferCache>(scratch_cache_bytes));
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const uint64_t comm_id = std::random_device()() * uint64_t{0x9e3779b97f4a7c15} + static_cast<uint64_t>(n);
  std::vector<std::unique_ptr<transport::ShmTransport>> shm;
  std::vector<std::string> paths;
  for (int r = 0; r < n; ++r) {
    transport::ShmOptions opts;
    opts.rank = r;
    opts.size = n;
    opts.local_ranks = all;
    opts.comm_id = comm_id;
    opts.single_copy = single_copy ? transport::SingleCopy::kOn : transport::SingleCopy::kOff;
    Result<std::unique_ptr<transport::ShmTransport>> t = transport::ShmTransport::Create(opts);
    if (!t.ok()) return t.status();
    paths.push_back(t.value()->path());
    shm.push_back(std::move(t.value()));
  }
  const std::vector<int> pids(static_cast<size_t>(n), static_cast<int>(getpid()));
  for (auto& t : shm) CHORUS_RETURN_IF_ERROR(t->Connect(paths, pids));
  for (auto& t : shm) CHORUS_RETURN_IF_ERROR(t->Start());
  for (auto& t : shm) world->transports_.push_back(std::move(t));
  return world;
}

TcpWorld::~TcpWorld() = default;

std::vector<Status> TcpWorld::Run(const std::function<uint64_t(int rank)>& fingerprint,
                                  const std::function<Status(int rank, const algos::Context& ctx)>& body,
                                  int64_t deadline_ms) {
  const uint64_t seq = seq_++;
  const Deadline deadline = Deadline::AfterMs(deadline_ms);
  std::vector<Status> st(transports_.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      algos::Context ctx{transport(r), seq, fingerprint(r), deadline};
      ctx.scratch = &scratch(r);
      st[r] = body(r, ctx);
      if (!st[r].ok()) transport(r).Abort(st[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  return st;
}

}  // namespace chorus::testing
