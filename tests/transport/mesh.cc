#include "tests/transport/mesh.h"

#include <unistd.h>

#include <atomic>
#include <numeric>
#include <thread>

namespace chorus::transport::testing {

Result<std::vector<std::unique_ptr<TcpTransport>>> MakeMesh(int n, const MeshOptions& o) {
  std::vector<std::unique_ptr<TcpTransport>> ts;
  std::vector<PeerAddress> addrs;
  for (int r = 0; r < n; ++r) {
    TcpOptions opts;
    opts.engine = o.engine == "uring" ? EngineKind::kUring : EngineKind::kEpoll;
    opts.nsockets = o.nsockets;
    opts.stripe_min_bytes = o.stripe_min_bytes;
    opts.timeout_ms = o.timeout_ms;
    opts.socket_bufsize = 1 << 20;
    opts.pause_above = o.pause_above;
    opts.resume_below = o.pause_above / 4;
    opts.connect = o.lazy ? ConnectMode::kLazy : ConnectMode::kEager;
    opts.connect_timeout_ms = ::chorus::testing::Scaled(std::chrono::milliseconds(o.connect_timeout_ms)).count();
    auto t = TcpTransport::Listen(r, n, o.comm_id, opts);
    if (!t.ok()) return t.status();
    addrs.push_back({t.value()->address(), "localhost", o.rank_channels.empty() ? o.channels : o.rank_channels[r]});
    ts.push_back(std::move(t.value()));
  }
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  Deadline d = Deadline::After(::chorus::testing::Scaled(std::chrono::seconds(20)));
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { st[r] = ts[r]->Connect(addrs, d); });
  for (auto& t : threads) t.join();
  for (const Status& s : st) CHORUS_RETURN_IF_ERROR(s);
  return ts;
}

Result<std::vector<std::unique_ptr<RdmaTransport>>> MakeRdmaMesh(int n, const MeshOptions& o) {
  std::vector<std::unique_ptr<RdmaTransport>> ts;
  std::vector<std::string> addrs, hosts;
  RdmaOptions opts;
  opts.timeout_ms = o.timeout_ms;
  opts.pause_above = o.pause_above;
  opts.resume_below = o.pause_above / 4;
  for (int r = 0; r < n; ++r) {
    auto t = RdmaTransport::Open(r, n, o.comm_id, opts);
    if (!t.ok()) return t.status();
    addrs.push_back(t.value()->address());
    hosts.push_back("localhost");
    ts.push_back(std::move(t.value()));
  }
  for (auto& t : ts) CHORUS_RETURN_IF_ERROR(t->Connect(addrs, hosts));
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  Deadline d = Deadline::After(::chorus::testing::Scaled(std::chrono::seconds(20)));
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { st[r] = ts[r]->Start(d); });
  for (auto& t : threads) t.join();
  for (const Status& s : st) CHORUS_RETURN_IF_ERROR(s);
  return ts;
}

Result<std::vector<std::unique_ptr<ShmTransport>>> MakeShmMesh(int n, const MeshOptions& o) {
  static std::atomic<uint64_t> meshes{0};  // segment names differ per mesh of this process
  std::vector<std::unique_ptr<ShmTransport>> ts;
  std::vector<std::string> paths;
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  for (int r = 0; r < n; ++r) {
    ShmOptions opts;
    opts.rank = r;
    opts.size = n;
    opts.local_ranks = all;
    opts.comm_id = (o.comm_id << 16) + meshes.fetch_add(1);
    opts.single_copy = o.engine == "shm_rings" || o.engine == "shm_small_rings" ? SingleCopy::kOff : SingleCopy::kOn;
    // The smallest rings a crowded host gets: frames of 4 KiB, wrapping often.
    if (o.engine == "shm_small_rings") opts.ring_bytes = kShmMinRingBytes;
    opts.timeout_ms = o.timeout_ms;
    opts.dir = o.shm_dir;
    auto t = ShmTransport::Create(opts);
    if (!t.ok()) return t.status();
    paths.push_back(t.value()->path());
    ts.push_back(std::move(t.value()));
  }
  const std::vector<int> pids(n, static_cast<int>(getpid()));
  for (auto& t : ts) CHORUS_RETURN_IF_ERROR(t->Connect(paths, pids));
  for (auto& t : ts) CHORUS_RETURN_IF_ERROR(t->Start());
  return ts;
}

Result<std::vector<std::unique_ptr<Transport>>> MakeAnyMesh(int n, const MeshOptions& o) {
  std::vector<std::unique_ptr<Transport>> out;
  if (o.engine == "shm" || o.engine == "shm_rings" || o.engine == "shm_small_rings") {
    auto m = MakeShmMesh(n, o);
    if (!m.ok()) return m.status();
    for (auto& t : m.value()) out.push_back(std::move(t));
  } else if (o.engine == "rdma") {
    auto m = MakeRdmaMesh(n, o);
    if (!m.ok()) return m.status();
    for (auto& t : m.value()) out.push_back(std::move(t));
  } else {
    auto m = MakeMesh(n, o);
    if (!m.ok()) return m.status();
    for (auto& t : m.value()) out.push_back(std::move(t));
  }
  return out;
}

std::string RdmaUnavailableReason() {
  auto t = RdmaTransport::Open(0, 1, 1, RdmaOptions());
  return t.ok() ? "" : t.status().message();
}

void Fill(std::vector<char>* buf, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < buf->size(); ++i) {
    x = x * 1103515245u + 12345u;
    (*buf)[i] = static_cast<char>(x >> 24);
  }
}

bool Check(const std::vector<char>& buf, uint32_t seed) {
  std::vector<char> want(buf.size());
  Fill(&want, seed);
  return want == buf;
}

}  // namespace chorus::transport::testing
