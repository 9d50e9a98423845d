// Collectives through the public API, as separate processes: every collective once
// on 3 ranks, async overlap, Split, mismatched calls, bad arguments.
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "algos/selector.h"
#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus {
namespace {

using testing::ExpectAllOk;
using testing::RankExit;
using testing::RunRanks;

// Each collective once, checked; values are small integers so every sum is exact.
int EveryCollective(int rank, const Options& o) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Communicator& c = **comm;
  const int n = c.size();
  const size_t count = 1000;
  std::vector<int32_t> in(count), out(count * n), all(count * n);
  for (size_t i = 0; i < count; ++i) in[i] = rank * 1000 + static_cast<int32_t>(i);

  RANK_OK(c.AllReduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum));
  for (size_t i = 0; i < count; ++i)
    RANK_CHECK(out[i] == 1000 * n * (n - 1) / 2 + n * static_cast<int>(i), "allreduce");

  std::vector<int32_t> b = in;
  RANK_OK(c.Broadcast(b.data(), count, DataType::kInt32, /*root=*/n - 1));
  for (size_t i = 0; i < count; ++i) RANK_CHECK(b[i] == (n - 1) * 1000 + static_cast<int>(i), "broadcast");

  RANK_OK(c.Reduce(in.data(), rank == 1 ? out.data() : nullptr, count, DataType::kInt32, ReduceOp::kMax, 1));
  if (rank == 1)
    for (size_t i = 0; i < count; ++i) RANK_CHECK(out[i] == (n - 1) * 1000 + static_cast<int>(i), "reduce");

  RANK_OK(c.AllGather(in.data(), all.data(), count, DataType::kInt32));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) RANK_CHECK(all[r * count + i] == r * 1000 + static_cast<int>(i), "allgather");

  // reduce_scatter: block r of every rank's input is (r, i); each rank gets n * its block.
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) all[r * count + i] = r * 10 + static_cast<int>(i % 10);
  std::vector<int32_t> mine(count);
  RANK_OK(c.ReduceScatter(all.data(), mine.data(), count, DataType::kInt32, ReduceOp::kSum));
  for (size_t i = 0; i < count; ++i)
    RANK_CHECK(mine[i] == n * (rank * 10 + static_cast<int>(i % 10)), "reduce_scatter");

  RANK_OK(c.Gather(in.data(), rank == 0 ? all.data() : nullptr, count, DataType::kInt32, 0));
  if (rank == 0)
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) RANK_CHECK(all[r * count + i] == r * 1000 + static_cast<int>(i), "gather");

  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) all[r * count + i] = r * 7 + rank;  // block r goes to rank r
  RANK_OK(c.Scatter(rank == 2 ? all.data() : nullptr, mine.data(), count, DataType::kInt32, 2));
  for (size_t i = 0; i < count; ++i) RANK_CHECK(mine[i] == rank * 7 + 2, "scatter");

  std::vector<int32_t> a2a(count * n);
  RANK_OK(c.AllToAll(all.data(), a2a.data(), count, DataType::kInt32));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) RANK_CHECK(a2a[r * count + i] == rank * 7 + r, "alltoall");

  RANK_OK(c.Barrier());
  RANK_OK(c.Shutdown());
  return 0;
}

TEST(CollectivesApi, EveryCollectiveThreeRanks) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(3, [&](int r) { return EveryCollective(r, o); }));
}

// Eight all-reduces in flight at once, of different sizes, plus a blocking one in
// the middle: tags keep their bytes apart.
TEST(CollectivesApi, OverlappingAsyncCollectives) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    const int k = 8;
    std::vector<std::vector<float>> bufs(k);
    std::vector<Work> works;
    for (int j = 0; j < k; ++j) {
      bufs[j].assign(1000 * (j + 1) * (j + 1), static_cast<float>(rank + j));
      works.push_back(
          (*comm)->IAllReduce(bufs[j].data(), bufs[j].data(), bufs[j].size(), DataType::kFloat32, ReduceOp::kSum));
    }
    int64_t x = rank + 1, y = 0;
    RANK_OK((*comm)->AllReduce(&x, &y, 1, DataType::kInt64, ReduceOp::kProd));
    RANK_CHECK(y == 2, "prod");
    for (int j = 0; j < k; ++j) {
      RANK_OK(works[j].Wait());
      for (float v : bufs[j]) RANK_CHECK(v == static_cast<float>(1 + 2 * j), "async " + std::to_string(j));
    }
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// torch's new_group: 4 ranks split into evens and odds; rank order by key (reversed).
TEST(CollectivesApi, SplitIntoTwoGroups) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(4, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    auto sub = (*comm)->Split(rank % 2, /*key=*/-rank);
    RANK_OK(sub.status());
    RANK_CHECK(*sub != nullptr, "no sub-communicator");
    RANK_CHECK((*sub)->size() == 2, "size");
    RANK_CHECK((*sub)->rank() == (rank < 2 ? 1 : 0), "rank by key");
    int32_t v = rank, sum = 0;
    RANK_OK((*sub)->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum));
    RANK_CHECK(sum == (rank % 2 == 0 ? 0 + 2 : 1 + 3), "sum in group");
    // The parent still works while the child exists.
    RANK_OK((*comm)->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum));
    RANK_CHECK(sum == 6, "sum in parent");
    auto none = (*comm)->Split(rank == 0 ? -1 : 0, 0);
    RANK_OK(none.status());
    RANK_CHECK((rank == 0) == (*none == nullptr), "negative color gives no communicator");
    if (*none) RANK_OK((*none)->Barrier());
    if (*none) RANK_OK((*none)->Shutdown());
    RANK_OK((*sub)->Shutdown());
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// Rank 0 calls all_reduce, rank 1 broadcast: both get an error naming both calls.
TEST(CollectivesApi, MismatchedCollectivesNameBothCalls) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    std::vector<float> buf(4096, 1.0f);
    Status st = rank == 0 ? (*comm)->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum)
                          : (*comm)->Broadcast(buf.data(), buf.size(), DataType::kFloat32, 1);
    std::fprintf(stderr, "rank %d: %s\n", rank, st.ToString().c_str());
    if (st.ok()) {
      // A root whose sends all went out cannot know yet; its next call learns of the
      // mismatch through the peer's abort.
      st = (*comm)->Barrier();
      std::fprintf(stderr, "rank %d then: %s\n", rank, st.ToString().c_str());
      RANK_CHECK(st.code() == StatusCode::kPeerFailed, st.ToString());
    }
    RANK_CHECK(st.code() == StatusCode::kMismatch || st.code() == StatusCode::kPeerFailed, st.ToString());
    // Either way the message names both calls.
    RANK_CHECK(st.message().find("all_reduce") != std::string::npos, st.message());
    RANK_CHECK(st.message().find("broadcast") != std::string::npos, st.message());
    return 0;
  }));
}

TEST(CollectivesApi, BadArgumentsAreNamed) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(2, [&](int /*rank*/) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    float x = 0;
    Status st = (*comm)->Broadcast(&x, 1, DataType::kFloat32, 2);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("root 2") != std::string::npos,
               st.ToString());
    st = (*comm)->AllReduce(nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("send buffer") != std::string::npos,
               st.ToString());
    st = (*comm)->AllReduce(&x, &x, 1, static_cast<DataType>(42), ReduceOp::kSum);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("dtype 42") != std::string::npos,
               st.ToString());
    // A count whose bytes wrap: named, nothing touched.
    const size_t huge = std::numeric_limits<size_t>::max() / 4;
    st = (*comm)->AllGather(&x, &x, huge, DataType::kFloat32);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument &&
                   st.message().find("count " + std::to_string(huge) + " of float32 on 2 ranks is more bytes") !=
                       std::string::npos,
               st.ToString());
    Result<std::string> why = (*comm)->Explain("all_reduce", huge + 1, DataType::kFloat64);
    RANK_CHECK(why.status().code() == StatusCode::kInvalidArgument, why.status().ToString());
    // Bad arguments fail locally and leave the communicator usable.
    RANK_OK((*comm)->AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum));
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// Broadcasts on either side of the size up to which the data rides the agreement's
// rounds (dissemination, then the tree), from every root, each checked; Explain names
// the switch.
TEST(CollectivesApi, BroadcastAroundTheAgreedThreshold) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(3, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    // 3 ranks crowd a host of fewer cores, where the threshold is higher.
    algos::CostModel crowded;
    crowded.crowding = 3.0 / static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
    const size_t t = algos::AgreedBroadcastMaxBytes(crowded, 3);
    for (int root = 0; root < 3; ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, t - 1, t, t + 1}) {
        testing::ApiCase c;
        c.kind = algos::Collective::kBroadcast;
        c.dtype = DataType::kUint8;
        c.count = bytes;
        c.root = root;
        c.seed = bytes * 3 + static_cast<uint64_t>(root);
        testing::ApiCall call(c, rank, (*comm)->size());
        RANK_OK(call.Run(**comm));
        RANK_OK(call.Check());
      }
    }
    Result<std::string> at = (*comm)->Explain("broadcast", t, DataType::kUint8);
    RANK_OK(at.status());
    RANK_CHECK(at->find(": dissemination (" + std::to_string(t) + " B on ") != std::string::npos, *at);
    Result<std::string> above = (*comm)->Explain("broadcast", t + 1, DataType::kUint8);
    RANK_OK(above.status());
    RANK_CHECK(above->find(": tree (") != std::string::npos, *above);
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// Broadcast out of place: the root's send lands in every rank's recv, its own included,
// and stays as it was; the other ranks pass no send buffer. Every algorithm (the tree and
// the chain send from the input while copying it; the others copy first), sizes below
// and above a chunk and the staging window, blocking and posted, over TCP and shared
// memory. Overlapping buffers on the root are refused, naming them.
int OutOfPlaceBroadcasts(int rank, const Options& base, TransportMode transport) {
  const std::optional<algos::Algorithm> forced[] = {std::nullopt, algos::Algorithm::kTree, algos::Algorithm::kChain,
                                                    algos::Algorithm::kScatterAllGather,
                                                    algos::Algorithm::kDissemination};
  for (std::optional<algos::Algorithm> a : forced) {
    Options o = base;
    Config cfg = o.config.value_or(Config::Process());
    cfg.algo = a;
    cfg.transport = transport;
    cfg.chunk_bytes = 64 << 10;
    cfg.staging_window_bytes = 1 << 20;
    o.config = cfg;
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    const int n = c.size();
    // The agreement's rounds carry small calls only, but on two ranks (agreement.h).
    const bool small_only = a == algos::Algorithm::kDissemination && n != 2;
    const size_t small = small_only ? 3 : 1000;
    for (size_t count : {small, size_t{300000}}) {
      if (small_only && count > small) continue;
      for (int root = 0; root < n; ++root) {
        std::vector<int32_t> send(count), recv(count, -1);
        for (size_t i = 0; i < count; ++i) send[i] = root * 1000003 + static_cast<int32_t>(i);
        const std::vector<int32_t> want = send;
        const void* from = rank == root ? send.data() : nullptr;
        const bool posted = (root + count) % 2 == 1;
        const std::string what = std::string(a ? algos::AlgorithmName(*a) : "auto") + " count " +
                                 std::to_string(count) + " root " + std::to_string(root) + (posted ? " posted" : "");
        RANK_OK(posted ? c.IBroadcast(from, recv.data(), count, DataType::kInt32, root).Wait()
                       : c.Broadcast(from, recv.data(), count, DataType::kInt32, root));
        RANK_CHECK(recv == want, "rank " + std::to_string(rank) + ": recv after " + what);
        RANK_CHECK(send == want, "rank " + std::to_string(rank) + ": send changed by " + what);
      }
    }
    RANK_OK(c.Shutdown());
  }
  return 0;
}

TEST(CollectivesApi, BroadcastOutOfPlaceOverTcp) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(3, [&](int r) { return OutOfPlaceBroadcasts(r, o, TransportMode::kTcp); }));
}

TEST(CollectivesApi, BroadcastOutOfPlaceOverSharedMemory) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(4, [&](int r) { return OutOfPlaceBroadcasts(r, o, TransportMode::kShm); }));
}

// Two ranks: the pair's path of the agreed broadcast sends the root's input straight.
TEST(CollectivesApi, BroadcastOutOfPlaceOnTwoRanks) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(2, [&](int r) { return OutOfPlaceBroadcasts(r, o, TransportMode::kShm); }));
}

TEST(CollectivesApi, BroadcastOutOfPlaceRefusesOverlappingBuffers) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(1, [&](int /*rank*/) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    std::vector<int32_t> buf(100);
    Status st = (*comm)->Broadcast(buf.data() + 10, buf.data(), 50, DataType::kInt32, 0);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("overlap") != std::string::npos,
               st.ToString());
    RANK_OK((*comm)->Broadcast(buf.data() + 50, buf.data(), 50, DataType::kInt32, 0));  // adjacent: fine
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

// Explain says which algorithm a call of a size would take here and why, the windows
// of a large one and the transport, without moving data; a bad name is named.
TEST(CollectivesApi, ExplainSaysWhichAlgorithmAndWhy) {
  Options o = testing::FileInitOptions();
  ExpectAllOk(RunRanks(3, [&](int /*rank*/) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    const Communicator& c = **comm;
    const uint64_t before = c.Counters().early_messages;
    Result<std::string> small = c.Explain("all_reduce", 2, DataType::kFloat32);
    RANK_OK(small.status());
    RANK_CHECK(
        small->find("all_reduce of 2 float32 (8 B) on 3 ranks: recursive_doubling (8 B on 1 host x 3 ranks") == 0,
        *small);
    // Every candidate's predicted time, beside the choice.
    RANK_CHECK(small->find("lowest predicted time; predicted: ring ") != std::string::npos &&
                   small->find(", recursive_doubling ") != std::string::npos,
               *small);
    // The transport, as Describe names it (TCP, or RDMA in the RDMA channel).
    const size_t over = small->find(", over ");
    RANK_CHECK(over != std::string::npos && c.Describe().find(small->substr(over + 7)) != std::string::npos,
               *small + " | " + c.Describe());
    Result<std::string> bcast = c.Explain("broadcast", 1 << 20, DataType::kFloat32);  // 4 MiB: 8 chunks
    RANK_OK(bcast.status());
    RANK_CHECK(bcast->find(": chain (4194304 B on 1 host x 3 ranks") != std::string::npos, *bcast);
    Result<std::string> big = c.Explain("all_reduce", size_t{40} << 20, DataType::kFloat32);  // 160 MiB
    RANK_OK(big.status());
    RANK_CHECK(big->find("3 windows of up to 67108864 B (CHORUS_STAGING_WINDOW), each ring") != std::string::npos,
               *big);
    Result<std::string> bad = c.Explain("allreduce", 1, DataType::kFloat32);
    RANK_CHECK(
        bad.status().code() == StatusCode::kInvalidArgument &&
            bad.status().message().find("'allreduce' is not a collective (all_reduce, broadcast") != std::string::npos,
        bad.status().ToString());
    RANK_CHECK(c.Counters().early_messages == before, "Explain moved data");
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

}  // namespace
}  // namespace chorus
