// The NCCL API on host buffers: ranks are forked processes that meet through one
// ncclUniqueId made by rank 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl.h"
#include "nccl/scale.h"
#include "tests/util/multiproc.h"

namespace {

using chorus::testing::ExpectAllOk;
using chorus::testing::RunRanks;

#define NCCL_RANK_OK(call)                                                                             \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    RANK_CHECK(r_ == ncclSuccess,                                                                      \
               std::string(#call) + ": " + ncclGetErrorString(r_) + ": " + ncclGetLastError(nullptr)); \
  } while (0)

// The unique id from rank 0 to the others through a pipe made before the fork, as an
// MPI program broadcasts it: the store then lives in rank 0 and the test process
// stays single-threaded when it forks.
class IdPipe {
 public:
  IdPipe() { EXPECT_EQ(pipe(fds_), 0); }
  ~IdPipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  // Rank 0 makes the id and writes n - 1 copies; each other rank reads one (a write of
  // 128 bytes to a pipe is atomic). Returns false on failure.
  bool Share(int rank, int n, ncclUniqueId* id) {
    if (rank == 0) {
      if (ncclGetUniqueId(id) != ncclSuccess) return false;
      for (int i = 1; i < n; ++i) {
        if (write(fds_[1], id->internal, sizeof(id->internal)) != static_cast<ssize_t>(sizeof(id->internal))) {
          return false;
        }
      }
      return true;
    }
    size_t got = 0;
    while (got < sizeof(id->internal)) {
      const ssize_t r = read(fds_[0], id->internal + got, sizeof(id->internal) - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }

 private:
  int fds_[2] = {-1, -1};
};

// A barrier of n forked ranks outside chorus: everyone writes to rank 0, rank 0 answers.
class PipeBarrier {
 public:
  PipeBarrier() {
    EXPECT_EQ(pipe(up_), 0);
    EXPECT_EQ(pipe(down_), 0);
  }
  ~PipeBarrier() {
    for (int fd : {up_[0], up_[1], down_[0], down_[1]}) close(fd);
  }
  bool Wait(int rank, int n) {
    char b = 0;
    if (rank != 0) return write(up_[1], &b, 1) == 1 && read(down_[0], &b, 1) == 1;
    for (int i = 1; i < n; ++i) {
      if (read(up_[0], &b, 1) != 1) return false;
    }
    for (int i = 1; i < n; ++i) {
      if (write(down_[1], &b, 1) != 1) return false;
    }
    return true;
  }

 private:
  int up_[2] = {-1, -1};
  int down_[2] = {-1, -1};
};

// Runs body(rank, comm) on n forked ranks of one communicator, then destroys it.
void RunComm(int n, const std::function<int(int, ncclComm_t)>& body) {
  IdPipe ids;
  ExpectAllOk(RunRanks(n, [&](int rank) {
    ncclUniqueId id;
    RANK_CHECK(ids.Share(rank, n, &id), "sharing the unique id");
    ncclComm_t comm = nullptr;
    NCCL_RANK_OK(ncclCommInitRank(&comm, n, id, rank));
    const int rc = body(rank, comm);
    if (rc != 0) {
      ncclCommAbort(comm);
      return rc;
    }
    NCCL_RANK_OK(ncclCommDestroy(comm));
    return 0;
  }));
}

size_t TypeSize(ncclDataType_t t) {
  static const size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return kSizes[t];
}

// Element i of a buffer of type t as a double, and back.
double Get(ncclDataType_t t, const std::vector<char>& b, size_t i) {
  const char* p = b.data() + i * TypeSize(t);
  switch (t) {
    case ncclInt8: return static_cast<double>(*reinterpret_cast<const int8_t*>(p));
    case ncclUint8: return static_cast<double>(*reinterpret_cast<const uint8_t*>(p));
    case ncclInt32: return static_cast<double>(*reinterpret_cast<const int32_t*>(p));
    case ncclUint32: return static_cast<double>(*reinterpret_cast<const uint32_t*>(p));
    case ncclInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case ncclUint64: return static_cast<double>(*reinterpret_cast<const uint64_t*>(p));
    case ncclFloat16: return chorus::nccl::HalfToFloat(*reinterpret_cast<const uint16_t*>(p));
    case ncclFloat32: return *reinterpret_cast<const float*>(p);
    case ncclFloat64: return *reinterpret_cast<const double*>(p);
    case ncclBfloat16: return chorus::nccl::Bf16ToFloat(*reinterpret_cast<const uint16_t*>(p));
    default: return NAN;
  }
}

void Put(ncclDataType_t t, std::vector<char>* b, size_t i, double v) {
  char* p = b->data() + i * TypeSize(t);
  switch (t) {
    case ncclInt8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case ncclUint8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case ncclInt32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case ncclUint32: *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v); break;
    case ncclInt64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case ncclUint64: *reinterpret_cast<uint64_t*>(p) = static_cast<uint64_t>(v); break;
    case ncclFloat16: *reinterpret_cast<uint16_t*>(p) = chorus::nccl::FloatToHalf(static_cast<float>(v)); break;
    case ncclFloat32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case ncclFloat64: *reinterpret_cast<double*>(p) = v; break;
    case ncclBfloat16: *reinterpret_cast<uint16_t*>(p) = chorus::nccl::FloatToBf16(static_cast<float>(v)); break;
    default: break;
  }
}

// Small integers, exact in every type and under every op on up to 4 ranks.
double Value(int rank, size_t i) { return static_cast<double>(1 + (rank + static_cast<int>(i)) % 3); }

double Reduce(ncclRedOp_t op, int n, size_t i) {
  double acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Value(r, i);
    switch (op) {
      case ncclSum:
      case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  return op == ncclAvg ? acc / n : acc;
}

std::vector<char> Filled(ncclDataType_t t, int rank, size_t count) {
  std::vector<char> b(count * TypeSize(t));
  for (size_t i = 0; i < count; ++i) Put(t, &b, i, Value(rank, i));
  return b;
}

TEST(NcclApiTest, InitQueryFinalizeDestroy) {
  for (int n : {2, 3, 4}) {
    RunComm(n, [n](int rank, ncclComm_t comm) {
      int count = 0;
      int me = -1;
      int dev = -2;
      NCCL_RANK_OK(ncclCommCount(comm, &count));
      NCCL_RANK_OK(ncclCommUserRank(comm, &me));
      NCCL_RANK_OK(ncclCommCuDevice(comm, &dev));
      RANK_CHECK(count == n && me == rank && dev >= -1, "count/rank/device");
      ncclResult_t async = ncclInternalError;
      NCCL_RANK_OK(ncclCommGetAsyncError(comm, &async));
      RANK_CHECK(async == ncclSuccess, "async error");
      NCCL_RANK_OK(ncclCommFinalize(comm));
      RANK_CHECK(ncclCommFinalize(comm) == ncclInvalidUsage, "second finalize");
      return 0;
    });
  }
}

TEST(NcclApiTest, AbortEndsEveryRank) {
  IdPipe ids;
  PipeBarrier done;
  ExpectAllOk(RunRanks(3, [&](int rank) {
    ncclUniqueId id;
    RANK_CHECK(ids.Share(rank, 3, &id), "sharing the unique id");
    ncclComm_t comm = nullptr;
    NCCL_RANK_OK(ncclCommInitRank(&comm, 3, id, rank));
    int32_t v = 1;
    int32_t sum = 0;
    NCCL_RANK_OK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
    RANK_CHECK(sum == 3, "allreduce before abort");
    // Abort is local: without this, an early abort (rank 0's takes its store along)
    // fails the ranks still setting up, which is not what this test is about.
    RANK_CHECK(done.Wait(rank, 3), "barrier");
    NCCL_RANK_OK(ncclCommAbort(comm));
    return 0;
  }));
}

TEST(NcclApiTest, AllReduceEveryTypeAndOp) {
  const int n = 3;
  const size_t count = 1001;
  RunComm(n, [&](int rank, ncclComm_t comm) {
    for (int ti = 0; ti < ncclNumTypes; ++ti) {
      const auto t = static_cast<ncclDataType_t>(ti);
      const bool is_float = t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
      for (int oi = 0; oi < ncclNumOps; ++oi) {
        const auto op = static_cast<ncclRedOp_t>(oi);
        std::vector<char> send = Filled(t, rank, count);
        std::vector<char> recv(send.size());
        const ncclResult_t r = ncclAllReduce(send.data(), recv.data(), count, t, op, comm, nullptr);
        const bool unsigned_wide = t == ncclUint32 || t == ncclUint64;
        if (unsigned_wide && op != ncclSum && op != ncclProd) {
          RANK_CHECK(r == ncclInvalidArgument, "uint32/64 max/min/avg must be refused");
          RANK_CHECK(std::string(ncclGetLastError(comm)).find("ncclUint") != std::string::npos, ncclGetLastError(comm));
          continue;
        }
        if (op == ncclAvg && !is_float) continue;  // an integer average rounds as chorus's kernels do
        RANK_CHECK(r == ncclSuccess, std::string("type ") + std::to_string(ti) + " op " + std::to_string(oi) + ": " +
                                         ncclGetLastError(comm));
        for (size_t i = 0; i < count; ++i) {
          RANK_CHECK(Get(t, recv, i) == Reduce(op, n, i), "type " + std::to_string(ti) + " op " + std::to_string(oi) +
                                                              " element " + std::to_string(i) + ": " +
                                                              std::to_string(Get(t, recv, i)));
        }
      }
    }
    return 0;
  });
}

TEST(NcclApiTest, RootedAndGatheringCollectives) {
  const int n = 4;
  const size_t count = 777;
  RunComm(n, [&](int rank, ncclComm_t comm) {
    for (ncclDataType_t t : {ncclFloat32, ncclInt64, ncclBfloat16}) {
      // Broadcast out of place from root 2, then in place (ncclBcast) from root 1.
      std::vector<char> send = Filled(t, rank, count);
      std::vector<char> recv(send.size());
      NCCL_RANK_OK(ncclBroadcast(send.data(), recv.data(), count, t, 2, comm, nullptr));
      for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(t, recv, i) == Value(2, i), "broadcast");
      std::vector<char> buf = Filled(t, rank, count);
      NCCL_RANK_OK(ncclBcast(buf.data(), count, t, 1, comm, nullptr));
      for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(t, buf, i) == Value(1, i), "bcast");
      // Reduce to root 3; the other ranks pass no receive buffer.
      std::vector<char> red(send.size());
      NCCL_RANK_OK(ncclReduce(send.data(), rank == 3 ? red.data() : nullptr, count, t, ncclMax, 3, comm, nullptr));
      if (rank == 3) {
        for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(t, red, i) == Reduce(ncclMax, n, i), "reduce");
      }
      // AllGather: rank r's block at r * count.
      std::vector<char> all(send.size() * n);
      NCCL_RANK_OK(ncclAllGather(send.data(), all.data(), count, t, comm, nullptr));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(t, all, r * count + i) == Value(r, i), "allgather");
      }
      // ReduceScatter: each rank gets its block of the sum.
      std::vector<char> big = Filled(t, rank, count * n);
      std::vector<char> mine(send.size());
      NCCL_RANK_OK(ncclReduceScatter(big.data(), mine.data(), count, t, ncclSum, comm, nullptr));
      for (size_t i = 0; i < count; ++i) {
        RANK_CHECK(Get(t, mine, i) == Reduce(ncclSum, n, rank * count + i), "reducescatter");
      }
    }
    return 0;
  });
}

TEST(NcclApiTest, PreMulSum) {
  const int n = 4;
  const size_t count = 300;
  RunComm(n, [&](int rank, ncclComm_t comm) {
    float half = 0.5F;
    ncclRedOp_t op;
    NCCL_RANK_OK(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, comm));
    RANK_CHECK(op >= ncclNumOps, "custom op id");
    std::vector<char> send = Filled(ncclFloat32, rank, count);
    std::vector<char> recv(send.size());
    NCCL_RANK_OK(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, op, comm, nullptr));
    for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(ncclFloat32, recv, i) == Reduce(ncclSum, n, i) * 0.5, "premul");
    // The input is left as it was.
    for (size_t i = 0; i < count; ++i) RANK_CHECK(Get(ncclFloat32, send, i) == Value(rank, i), "input kept");
    // A float op on int32 buffers is refused.
    RANK_CHECK(ncclAllReduce(send.data(), recv.data(), count, ncclInt32, op, comm, nullptr) == ncclInvalidArgument,
               "type mismatch");
    NCCL_RANK_OK(ncclRedOpDestroy(op, comm));
    RANK_CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument, "double destroy");

    int32_t three = 3;
    NCCL_RANK_OK(ncclRedOpCreatePreMulSum(&op, &three, ncclInt32, ncclScalarDevice, comm));
    std::vector<char> big = Filled(ncclInt32, rank, count * n);
    std::vector<char> mine(count * 4);
    NCCL_RANK_OK(ncclReduceScatter(big.data(), mine.data(), count, ncclInt32, op, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      RANK_CHECK(Get(ncclInt32, mine, i) == 3 * Reduce(ncclSum, n, rank * count + i), "premul reducescatter");
    }
    NCCL_RANK_OK(ncclRedOpDestroy(op, comm));
    return 0;
  });
}

TEST(NcclApiTest, GroupedAllToAllOfSendsAndRecvs) {
  const int n = 4;
  // Large enough that a send cannot complete before its receive is posted.
  for (size_t count : {size_t{5}, size_t{1} << 20}) {
    RunComm(n, [&](int rank, ncclComm_t comm) {
      std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count));
      std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count, -1));
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) out[p][i] = static_cast<int32_t>(rank * 1000 + p * 10 + (i % 7));
      }
      NCCL_RANK_OK(ncclGroupStart());
      NCCL_RANK_OK(ncclGroupStart());  // nesting: only the outermost end issues
      for (int p = 0; p < n; ++p) NCCL_RANK_OK(ncclSend(out[p].data(), count, ncclInt32, p, comm, nullptr));
      NCCL_RANK_OK(ncclGroupEnd());
      for (int p = 0; p < n; ++p) NCCL_RANK_OK(ncclRecv(in[p].data(), count, ncclInt32, p, comm, nullptr));
      RANK_CHECK(in[(rank + 1) % n][0] == -1, "nothing may run before the outermost ncclGroupEnd");
      NCCL_RANK_OK(ncclGroupEnd());
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          RANK_CHECK(in[p][i] == static_cast<int32_t>(p * 1000 + rank * 10 + (i % 7)),
                     "alltoall from " + std::to_string(p));
        }
      }
      return 0;
    });
  }
}

TEST(NcclApiTest, SplitByColor) {
  RunComm(4, [](int rank, ncclComm_t comm) {
    ncclComm_t sub = nullptr;
    const int color = rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    NCCL_RANK_OK(ncclCommSplit(comm, color, -rank, &sub, nullptr));
    if (rank == 3) {
      RANK_CHECK(sub == nullptr, "NOCOLOR gives NULL");
      return 0;
    }
    int count = 0;
    int me = -1;
    NCCL_RANK_OK(ncclCommCount(sub, &count));
    NCCL_RANK_OK(ncclCommUserRank(sub, &me));
    // Colour 0: ranks 0 and 2, ordered by key -rank: 2 first.
    RANK_CHECK(count == (color == 0 ? 2 : 1), "sub size");
    RANK_CHECK(me == (rank == 2 || rank == 1 ? 0 : 1), "sub rank");
    int32_t v = rank;
    int32_t sum = 0;
    NCCL_RANK_OK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, sub, nullptr));
    RANK_CHECK(sum == (color == 0 ? 2 : 1), "sub allreduce");
    NCCL_RANK_OK(ncclCommDestroy(sub));
    return 0;
  });
}

TEST(NcclApiTest, InitAllRanksOverThreadsInOneProcess) {
  std::vector<ncclComm_t> comms(3, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 3, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  // NCCL's one-thread pattern: a group across the communicators of the process.
  std::vector<float> send = {1, 2, 3};
  std::vector<float> recv(3 * 3, 0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ncclAllReduce(&send[i], &recv[i * 3], 1, ncclFloat, ncclSum, comms[i], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(recv[i * 3], 6.0F);
  std::vector<std::thread> threads;
  for (ncclComm_t c : comms) threads.emplace_back([c] { EXPECT_EQ(ncclCommDestroy(c), ncclSuccess); });
  for (std::thread& t : threads) t.join();
}

TEST(NcclApiTest, ArgumentErrorsNameWhatWasWrong) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 5), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 5"), std::string::npos) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("nranks 0"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  ncclUniqueId bad = id;
  bad.internal[40] ^= 1;
  EXPECT_EQ(ncclCommInitRank(&comm, 1, bad, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("unique id"), std::string::npos);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);

  float x = 1;
  float y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("comm is NULL"), std::string::npos);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);

  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("datatype 10"), std::string::npos) << ncclGetLastError(comm);
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, static_cast<ncclRedOp_t>(99), comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("op 99"), std::string::npos);
  EXPECT_EQ(ncclSend(&x, 1, ncclFloat, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("peer 1"), std::string::npos);
  EXPECT_EQ(ncclReduce(&x, &y, 1, ncclFloat, ncclSum, -1, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("root -1"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(nullptr, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);
  ncclComm_t sub = nullptr;
  EXPECT_EQ(ncclCommSplit(comm, -5, 0, &sub, nullptr), ncclInvalidArgument);
  // A one-rank communicator still works after all of that.
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 1.0F);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclInvalidArgument);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidArgument), "invalid argument");
}

}  // namespace
