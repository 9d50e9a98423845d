#include "algos/cost_model.h"

#include <algorithm>
#include <cmath>

#include "algos/binomial_tree.h"
#include "algos/chunking.h"
#include "algos/selector.h"

namespace chorus::algos {
namespace {

// Per transport: latency per message (us) and bandwidth per pair (GB/s), as
// tools/perf/cost_model_check.sh measures them (docs/design/cost_model.md); RDMA's row
// is assumed.
constexpr LinkCost kLinkCosts[] = {/* shm  */ {0.8, 10.0},
                                   /* tcp  */ {13.0, 1.0},
                                   /* rdma */ {4.0, 10.0}};
// Element-wise reduction, GB/s of input reduced.
constexpr double kReduceGbps = 8.0;
// Chunks of the whole message up to which Rabenseifner is weighed (docs/design/cost_model.md
// says where it was measured against the ring).
constexpr double kRabenseifnerMaxChunks = 4;

// Ranks per core k on the most crowded machine: each rank copies on a 1/k share of a
// core (its bytes take k times as long), and each message waits for the scheduler too
// (its latency more than k times). Fitted to 2 and 4 ranks a core (docs/design/cost_model.md).
constexpr double kCrowdedLatencyPerRank = 1.5;
constexpr double kCrowdedBytesPerRank = 1.0;

double Us(double bytes, double gbps) { return bytes / (gbps * 1e3); }  // GB/s = 1e3 bytes/us

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

int FloorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// Recursive doubling over n ranks: `near` of its log2 steps (the first ones, partners
// r ^ 1, r ^ 2, ...) stay within a host on link `in`, the others cross on `l`; a world
// that is not a power of two folds its extra ranks in and out over `l`.
double AllReduceRd(int n, double s, const LinkCost& l, int near = 0, const LinkCost* in = nullptr) {
  if (n < 2) return 0;
  const int k = FloorLog2(n), fold = (n & (n - 1)) != 0 ? 1 : 0;
  double t = fold * (2 * (l.latency_us + Us(s, l.gbps)) + Us(s, kReduceGbps));
  for (int j = 0; j < k; ++j) {
    const LinkCost& link = j < near && in != nullptr ? *in : l;
    t += link.latency_us + Us(s, link.gbps) + Us(s, kReduceGbps);
  }
  return t;
}
double AllReduceRing(int n, double s, const LinkCost& l) {
  if (n < 2) return 0;
  return 2.0 * (n - 1) * l.latency_us + 2.0 * (n - 1) / n * Us(s, l.gbps) + double(n - 1) / n * Us(s, kReduceGbps);
}
// Rabenseifner: 2 log2 p steps of halving then doubling, each rank sending and reducing
// (p-1)/p of S each way (p the largest power of two <= n); a world that is not a power
// of two folds its extra ranks in and out, whole vectors, as recursive doubling does.
double AllReduceRabenseifner(int n, double s, const LinkCost& l) {
  if (n < 2) return 0;
  const int k = FloorLog2(n), p = 1 << k, fold = p != n ? 1 : 0;
  return fold * (2 * (l.latency_us + Us(s, l.gbps)) + Us(s, kReduceGbps)) + 2.0 * k * l.latency_us +
         2.0 * (p - 1) / p * Us(s, l.gbps) + double(p - 1) / p * Us(s, kReduceGbps);
}

// The double binary tree (allreduce_tree.cc): each tree carries half of S in C chunks of
// TreeChunkBytes; the last chunk is back down after 2 depth + C - 1 chunk times, each
// the busiest rank's k messages of a chunk (TreeSendsPerChunk), sent back to back so
// that their bytes add up and their latencies overlap, and its sum of its own chunk with
// its children's. A last level partly filled counts whole (on 3 ranks the tree measured
// slower than recursive doubling's three steps).
double TreeAllReduceUs(int n, double s, const LinkCost& l, size_t max_chunk) {
  if (n < 2) return 0;
  const int depth = CeilLog2(n);
  const double half = s / 2;
  const double chunk = std::min(half, static_cast<double>(TreeChunkBytes(static_cast<size_t>(half), n, max_chunk)));
  const double chunks = std::max(1.0, std::ceil(half / std::max(1.0, chunk)));
  const double added = std::min(3, n) - 1;  // inputs summed into a chunk: up to two children's
  return (2 * depth + chunks - 1) *
         (l.latency_us + TreeSendsPerChunk(n) * Us(chunk, l.gbps) + Us(added * chunk, kReduceGbps));
}

// A flat broadcast of s bytes among n ranks over l, the agreement not counted. Of C
// chunks, the chain delivers the last after (n - 2) + C chunk times, the binomial tree's
// root sends each chunk to ceil(log2 n) children in turn. `near` of the root's children
// share its host and are reached over `in`: sends over the two links run at once, so a
// chunk costs the busier link's turn. Negative where `a` is not one.
double BroadcastUs(Algorithm a, int n, double s, const LinkCost& l, size_t chunk_bytes, int near = 0,
                   const LinkCost* in = nullptr) {
  const double chunk = std::min<double>(s, static_cast<double>(std::max<size_t>(1, chunk_bytes)));
  const double chunks = std::max(1.0, std::ceil(s / std::max(1.0, chunk)));
  const double t = l.latency_us + Us(chunk, l.gbps);
  if (a == Algorithm::kChain) return n > 2 ? (n - 2 + chunks) * t : -1;
  if (a == Algorithm::kTree) {
    const double t_in = in != nullptr ? in->latency_us + Us(chunk, in->gbps) : t;
    return chunks * std::max((CeilLog2(n) - near) * t, near * t_in);
  }
  // van de Geijn: the root scatters (n-1)/n of S down the binomial tree, then the ring
  // all-gathers it, each rank sending (n-1)/n of S in n-1 steps.
  if (a == Algorithm::kScatterAllGather) {
    if (n < kScatterAllGatherMinRanks) return -1;
    const double spread = double(n - 1) / n * Us(s, l.gbps);
    return CeilLog2(n) * l.latency_us + spread + (n - 1) * l.latency_us + spread;
  }
  return -1;
}

}  // namespace

double CostModel::RabenseifnerUs(int n, double s, const LinkCost& l) const {
  // Above, each of its whole-half steps reduces only after its transfer, where the
  // ring's chunks overlap the two, and neither formula counts that.
  if (s > kRabenseifnerMaxChunks * static_cast<double>(chunk_bytes)) return -1;
  return AllReduceRabenseifner(n, s, l);
}

std::pair<Algorithm, double> CostModel::AcrossHosts(size_t bytes, int hosts, int sharing) const {
  const LinkCost out = InterCost();
  const LinkCost l{out.latency_us, out.gbps / std::max(1, sharing)};
  const double s = static_cast<double>(bytes);
  std::pair<Algorithm, double> best{Algorithm::kRecursiveDoubling, AllReduceRd(hosts, s, l)};
  const double rab = RabenseifnerUs(hosts, s, l);
  if (rab >= 0 && rab < best.second) best = {Algorithm::kRabenseifner, rab};
  const double ring = AllReduceRing(hosts, s, l);
  if (ring < best.second) best = {Algorithm::kRing, ring};
  const double tree = TreeAllReduceUs(hosts, s, l, chunk_bytes);
  if (tree < best.second) best = {Algorithm::kTree, tree};
  return best;
}

std::pair<Algorithm, double> CostModel::BroadcastAmong(size_t bytes, int ranks, bool across) const {
  const LinkCost l = across ? InterCost() : IntraCost();
  const double s = static_cast<double>(bytes);
  std::pair<Algorithm, double> best{Algorithm::kTree, BroadcastUs(Algorithm::kTree, ranks, s, l, chunk_bytes)};
  for (Algorithm a : {Algorithm::kChain, Algorithm::kScatterAllGather}) {
    const double t = BroadcastUs(a, ranks, s, l, chunk_bytes);
    if (t >= 0 && t < best.second) best = {a, t};
  }
  return best;
}

const char* LinkName(LinkKind k) {
  switch (k) {
    case LinkKind::kShm: return "shm";
    case LinkKind::kTcp: return "tcp";
    case LinkKind::kRdma: return "rdma";
  }
  return "?";
}

const LinkCost& CostOf(LinkKind k) { return kLinkCosts[static_cast<int>(k)]; }

double CostModel::PredictUs(Collective c, Algorithm a, size_t bytes, int world_size) const {
  const double t = PredictUncrowded(c, a, bytes, world_size);
  if (t < 0 || crowding <= 1) return t;
  // The bytes' share of t: the same prediction with no latency per message.
  CostModel bytes_only = *this;
  bytes_only.intra_cost = LinkCost{0, IntraCost().gbps};
  bytes_only.inter_cost = LinkCost{0, InterCost().gbps};
  const double moved = bytes_only.PredictUncrowded(c, a, bytes, world_size);
  return (t - moved) * kCrowdedLatencyPerRank * crowding + moved * kCrowdedBytesPerRank * crowding;
}

double CostModel::PredictUncrowded(Collective c, Algorithm a, size_t bytes, int world_size) const {
  const bool known = topology.size() == world_size;
  const int n = world_size, hosts = known ? topology.num_hosts() : 1;
  const double s = static_cast<double>(bytes);
  // A flat algorithm is as slow as its slowest link.
  const LinkCost in = IntraCost(), out = InterCost();
  const LinkCost& flat = hosts > 1 ? out : in;
  switch (c) {
    case Collective::kAllReduce:
      if (a == Algorithm::kRecursiveDoubling) {
        // Hosts of L ranks in a row (L a power of two): the first log2 L steps stay home.
        const int local = known ? topology.max_local() : n;
        const bool rows = known && topology.even() && IsPowerOfTwo(local) && topology.hosts[0].back() == local - 1;
        return AllReduceRd(n, s, flat, rows ? FloorLog2(local) : 0, &in);
      }
      if (a == Algorithm::kRing) return AllReduceRing(n, s, flat);
      if (a == Algorithm::kRabenseifner) return RabenseifnerUs(n, s, flat);
      if (a == Algorithm::kTree) {
        // Nearly every link of the heap-ordered trees crosses between hosts, all of a
        // host's ranks sending at once: they share its link.
        const int local = known ? topology.max_local() : 1;
        const LinkCost shared{flat.latency_us, hosts > 1 ? flat.gbps / std::max(1, local) : flat.gbps};
        return TreeAllReduceUs(n, s, shared, chunk_bytes);
      }
      if (a == Algorithm::kHierarchical) {
        const int local = known ? topology.max_local() : n;
        if (!known || hosts < 2 || local < 2) return -1;
        // Across hosts, as the algorithm does: the fastest flat all-reduce among them.
        const auto across = [&](double each, int sharing) {
          return AcrossHosts(static_cast<size_t>(each), hosts, sharing).second;
        };
        if (!topology.even()) {
          // By leaders: reduce up and broadcast down a tree within the largest host, the
          // whole S among the leaders.
          return CeilLog2(local) * (2 * in.latency_us + 2 * Us(s, in.gbps) + Us(s, kReduceGbps)) + across(s, 1);
        }
        // Within the host: reduce-scatter and all-gather, 2(L-1) steps, each rank sends
        // 2(L-1)/L of S. Across: each rank's slice S/L, the L slices of a host sharing its
        // network at once (so at S/bandwidth in all).
        const double within = 2.0 * (local - 1) * in.latency_us + 2.0 * (local - 1) / local * Us(s, in.gbps) +
                              double(local - 1) / local * Us(s, kReduceGbps);
        return within + across(s / local, local);
      }
      return -1;
    case Collective::kBroadcast: {
      // Every one runs after the ranks agree on the call: ceil(log2 n) rounds of tiny messages.
      const double agree = CeilLog2(n) * flat.latency_us;
      // The agreement's rounds carry the data itself, whole, up to the measured limit.
      if (a == Algorithm::kDissemination) {
        return bytes <= AgreedBroadcastMaxBytes(*this, n) ? CeilLog2(n) * (flat.latency_us + Us(s, flat.gbps)) : -1;
      }
      if (a == Algorithm::kHierarchical) {
        const int local = known ? topology.max_local() : n;
        if (!known || hosts < 2 || local < 2) return -1;
        // One rank a host across (the root's host: the root), then each of them to its
        // host (the largest), segment by segment. Each bridge, the root included, runs
        // the two steps of a segment one after the other, so every segment costs both.
        const size_t seg = std::min(bytes, HierarchicalSegmentElems(chunk_bytes, 1));
        const double segments = std::max(1.0, std::ceil(s / static_cast<double>(std::max<size_t>(1, seg))));
        const double up = BroadcastAmong(seg, hosts, true).second, down = BroadcastAmong(seg, local, false).second;
        return agree + segments * (up + down);
      }
      // The tree's root (rank 0, as the model assumes) sends to ranks 2^k: those on its
      // host take the link within.
      int near = 0;
      for (int d = 1; known && hosts > 1 && d < n; d <<= 1) near += topology.host_of[d] == topology.host_of[0];
      const double t = BroadcastUs(a, n, s, flat, chunk_bytes, near, &in);
      return t < 0 ? t : agree + t;
    }
    case Collective::kAllGather: {  // s: the whole output
      // Every algorithm also copies the rank's own block into the output, a copy as fast
      // as shared memory's.
      const double own = Us(s / n, CostOf(LinkKind::kShm).gbps);
      if (a == Algorithm::kRing) return own + (n - 1) * flat.latency_us + double(n - 1) / n * Us(s, flat.gbps);
      if (a == Algorithm::kRecursiveDoubling) {
        if (!IsPowerOfTwo(n)) return -1;
        return own + CeilLog2(n) * flat.latency_us + double(n - 1) / n * Us(s, flat.gbps);
      }
      if (a == Algorithm::kHierarchical) {
        const int local = known ? topology.max_local() : n;
        if (!known || hosts < 2 || local < 2 || !topology.even()) return -1;
        // Across: each rail's ring over its H blocks (S/L of the whole), the L rails of
        // a host sharing its network at once. Within: H rings of L blocks, one per host's
        // blocks, (L-1)/L of S in all.
        const LinkCost shared{out.latency_us, out.gbps / local};
        const double across = (hosts - 1) * shared.latency_us + double(hosts - 1) / hosts * Us(s / local, shared.gbps);
        const double within = hosts * (local - 1) * in.latency_us + double(local - 1) / local * Us(s, in.gbps);
        return own + across + within;
      }
      return -1;
    }
    case Collective::kReduceScatter: {  // s: the whole input (as CollectiveCall::bytes), n blocks
      const double block = s / n;
      if (a == Algorithm::kHierarchical) {
        const int local = known ? topology.max_local() : n;
        if (!known || hosts < 2 || local < 2 || !topology.even()) return -1;
        // Within: H rings of L-1 steps, one per host's blocks of this rail. Across: the
        // rail's ring of H-1 steps over its blocks, the L rails of a host sharing its
        // network at once.
        const LinkCost shared{out.latency_us, out.gbps / local};
        const double within = hosts * (local - 1) * (in.latency_us + Us(block, in.gbps) + Us(block, kReduceGbps));
        return within + (hosts - 1) * (shared.latency_us + Us(block, shared.gbps) + Us(block, kReduceGbps));
      }
      return (n - 1) * (flat.latency_us + Us(block, flat.gbps) + Us(block, kReduceGbps));
    }
    case Collective::kReduce:
      if (a == Algorithm::kHierarchical) {
        const int local = known ? topology.max_local() : n;
        if (!known || hosts < 2 || local < 2) return -1;
        // Priced as the flat tree is, level by level: the largest host's levels over
        // shared memory, then the hosts' levels over the network.
        return CeilLog2(local) * (in.latency_us + Us(s, in.gbps) + Us(s, kReduceGbps)) +
               CeilLog2(hosts) * (out.latency_us + Us(s, out.gbps) + Us(s, kReduceGbps));
      }
      return CeilLog2(n) * (flat.latency_us + Us(s, flat.gbps) + Us(s, kReduceGbps));
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllToAll:  // s: everything one rank ends with
      return (n - 1) * flat.latency_us + double(n - 1) / n * Us(s, flat.gbps);
    case Collective::kBarrier: return CeilLog2(n) * flat.latency_us;
  }
  return -1;
}

}  // namespace chorus::algos
