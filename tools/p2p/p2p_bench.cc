// chorus_p2p_bench: point-to-point latency and bandwidth between ranks 0 and 1 of a
// communicator, through the public API (what every collective is built on).
//
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 chorus_p2p_bench &
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 chorus_p2p_bench
//   (or: chorusrun --nproc-per-node 2 chorus_p2p_bench; tools/netns/run_two_nodes.sh -- ...)
//
// Latency: 8-byte ping-pong, the median of per-iteration round trips, halved.
// Bandwidth: rank 0 streams `window` messages of a size at a time to rank 1, which
// answers with one byte at the end; GB/s = bytes / time. Rank 1 checks the pattern of
// what it received (#wrong counts corrupted bytes). With -d both ranks stream to each
// other at once (like `ib_write_bw -b`); GB/s is then per direction.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  size_t min_bytes = 64 << 10;
  size_t max_bytes = 256 << 20;
  int lat_iters = 5000;
  size_t total_bytes = size_t{1} << 30;  // per size, at least 4 messages
  int window = 4;
  bool bidir = false;
};

void Usage() {
  std::fprintf(stderr,
               "usage: chorus_p2p_bench [-b min_bytes] [-e max_bytes] [-l latency_iters] [-t bytes_per_size] "
               "[-w window] [-d]\n  -d: both directions at once (GB/s per direction)\n  ranks, addresses and engine "
               "from the environment (RANK, WORLD_SIZE, MASTER_ADDR, "
               "MASTER_PORT, CHORUS_TCP_ENGINE, ...)\n");
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-d") {
      f->bidir = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    chorus::Result<int64_t> v = chorus::ParseByteSize(a, argv[++i]);
    if (!v.ok() || v.value() < 0) {
      std::fprintf(stderr, "%s\n", v.status().message().c_str());
      return false;
    }
    if (a == "-b")
      f->min_bytes = v.value();
    else if (a == "-e")
      f->max_bytes = v.value();
    else if (a == "-l")
      f->lat_iters = static_cast<int>(v.value());
    else if (a == "-t")
      f->total_bytes = v.value();
    else if (a == "-w")
      f->window = std::max<int>(1, static_cast<int>(v.value()));
    else
      return false;
  }
  return f->min_bytes >= 1 && f->min_bytes <= f->max_bytes;
}

uint8_t Pattern(size_t i, size_t seed) { return static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 12)) & 0xff); }

int Fail(const chorus::Status& st) {
  std::fprintf(stderr, "chorus_p2p_bench: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    Usage();
    return 2;
  }
  auto comm = chorus::Communicator::Create();
  if (!comm.ok()) return Fail(comm.status());
  chorus::Communicator& c = *comm.value();
  const int rank = c.rank();
  if (c.size() < 2) return Fail(chorus::InvalidArgument("needs at least 2 ranks"));
  if (rank > 1) {  // only ranks 0 and 1 take part
    chorus::Status st = c.Barrier();
    return st.ok() ? 0 : Fail(st);
  }
  const int peer = 1 - rank;
  if (rank == 0) std::printf("# %s\n", c.Describe().c_str());

  // Latency.
  uint64_t ping = 0;
  std::vector<double> rtt;
  rtt.reserve(f.lat_iters);
  for (int i = -100; i < f.lat_iters; ++i) {  // 100 warm-up round trips
    auto t0 = Clock::now();
    chorus::Status st = rank == 0 ? c.Send(&ping, 8, peer, 1) : c.Recv(&ping, 8, peer, 1);
    if (st.ok()) st = rank == 0 ? c.Recv(&ping, 8, peer, 2) : c.Send(&ping, 8, peer, 2);
    if (!st.ok()) return Fail(st);
    if (i >= 0) rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(rtt.begin(), rtt.end());
  if (rank == 0) {
    std::printf("# 8-byte latency (half round trip): median %.2f us, p10 %.2f us, p90 %.2f us over %d iterations\n",
                rtt[rtt.size() / 2] / 2, rtt[rtt.size() / 10] / 2, rtt[rtt.size() * 9 / 10] / 2, f.lat_iters);
    std::printf("# bandwidth: %s, window %d\n",
                f.bidir ? "both directions at once, GB/s per direction" : "rank 0 to rank 1", f.window);
    std::printf("%12s %8s %12s %10s %8s\n", "size(B)", "msgs", "time(us)", "GB/s", "#wrong");
  }

  // Bandwidth. Rank r's message in window slot w carries Pattern(i, w + 100 * r).
  const bool sends = rank == 0 || f.bidir, recvs = rank == 1 || f.bidir;
  const int send_tag = rank == 0 ? 3 : 6, recv_tag = rank == 0 ? 6 : 3;
  std::vector<std::vector<uint8_t>> out(sends ? f.window : 0, std::vector<uint8_t>(f.max_bytes));
  std::vector<std::vector<uint8_t>> in(recvs ? f.window : 0, std::vector<uint8_t>(f.max_bytes));
  for (int w = 0; w < static_cast<int>(out.size()); ++w) {
    for (size_t i = 0; i < f.max_bytes; ++i) out[w][i] = Pattern(i, w + 100 * rank);
  }
  for (size_t size = f.min_bytes; size <= f.max_bytes; size *= 4) {
    const size_t msgs = std::max<size_t>(4, f.total_bytes / size);
    uint8_t ack = 0;
    // Clear before the barrier: a receiver still busy clearing would post its receives
    // late and time the unexpected-message path instead.
    for (auto& b : in) std::memset(b.data(), 0, size);
    chorus::Status st = c.Barrier();
    if (!st.ok()) return Fail(st);
    auto t0 = Clock::now();
    std::vector<chorus::Work> sending, receiving;
    auto wait_front = [&st](std::vector<chorus::Work>& q) {
      if (st.ok()) st = q.front().Wait();
      q.erase(q.begin());
    };
    for (size_t m = 0; m < msgs && st.ok(); ++m) {
      const int w = static_cast<int>(m % f.window);
      if (recvs) {
        if (receiving.size() == static_cast<size_t>(f.window)) wait_front(receiving);
        receiving.push_back(c.IRecv(in[w].data(), size, peer, recv_tag));
      }
      if (sends) {
        if (sending.size() == static_cast<size_t>(f.window)) wait_front(sending);
        sending.push_back(c.ISend(out[w].data(), size, peer, send_tag));
      }
    }
    for (auto* q : {&receiving, &sending}) {
      while (!q->empty()) wait_front(*q);
    }
    // Rank 0's clock stops when rank 1 is done too.
    if (st.ok()) st = rank == 0 ? c.Recv(&ack, 1, peer, 4) : c.Send(&ack, 1, peer, 4);
    if (!st.ok()) return Fail(st);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    // Every window slot last held message (msgs - window + slot): its pattern is the slot's.
    uint64_t wrong = 0, peer_wrong = 0;
    for (int w = 0; w < static_cast<int>(in.size()) && static_cast<size_t>(w) < msgs; ++w) {
      for (size_t i = 0; i < size; ++i) wrong += in[w][i] != Pattern(i, w + 100 * peer);
    }
    st = rank == 1 ? c.Send(&wrong, sizeof(wrong), 0, 5) : c.Recv(&peer_wrong, sizeof(peer_wrong), 1, 5);
    if (!st.ok()) return Fail(st);
    wrong += peer_wrong;
    if (rank == 0) {
      std::printf("%12zu %8zu %12.0f %10.3f %8llu\n", size, msgs, us, static_cast<double>(size * msgs) / us / 1e3,
                  static_cast<unsigned long long>(wrong));
      std::fflush(stdout);
    }
    if (wrong != 0) return 1;
  }
  chorus::Status st = c.Barrier();
  return st.ok() ? 0 : Fail(st);
}
