// Collectives and send/recv on CUDA device buffers through the public API, in forked
// ranks over TCP on one GPU: the CUDA-stream forms (stream order both ways), the host
// forms given device pointers, and the misuse errors. Without a GPU these skip with
// the runtime's reason, except the one that checks what a machine without a GPU says.
//
// CUDA does not survive fork(): the parent never touches it; whether a GPU is usable
// is asked in a forked probe.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "algos/cuda_ipc_sync.h"
#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"
#include "tests/chorus/api_case.h"
#include "tests/chorus/test_kernels.h"
#include "tests/util/multiproc.h"
#include "transport/cuda_ipc/cuda_ipc.h"

namespace chorus {
namespace {

namespace cu = kernels::cuda;
using algos::Collective;
using testing::ApiCall;
using testing::ApiCase;
using testing::ExpectAllOk;
using testing::RunRanks;

// {usable, "why not"}, asked once in a child process.
std::pair<bool, std::string> GpuProbe() {
  static const std::pair<bool, std::string> probe = [] {
    int fds[2];
    if (pipe(fds) != 0) return std::make_pair(false, std::string("pipe failed"));
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      Status st = cu::DeviceStatus();
      std::string msg = st.ok() ? std::to_string(cu::DeviceCount()) + " device(s)" : st.message();
      (void)!write(fds[1], msg.data(), msg.size());
      _exit(st.ok() ? 0 : 1);
    }
    close(fds[1]);
    std::string msg;
    char buf[256];
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) msg.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return std::make_pair(WIFEXITED(status) && WEXITSTATUS(status) == 0, msg);
  }();
  return probe;
}

#define SKIP_WITHOUT_GPU() \
  if (auto _p = GpuProbe(); !_p.first) GTEST_SKIP() << _p.second

// "always": these ranks share one GPU, where "auto" stages calls up to 1 MiB after the
// first (SmallCallsOfRanksSharingAGpuWithoutMpsAreStaged); the tests of CUDA IPC want
// it at every size.
Options TestOptions(CudaIpcMode cuda_ipc = CudaIpcMode::kAlways) {
  Options o = testing::FileInitOptions(60000, 30000);
  o.config->cuda_ipc = cuda_ipc;
  return o;
}

// How staged stream-form calls hold the caller's stream (CHORUS_STAGING_SYNC):
// signals (the default: every CUDA operation enqueued at the call) or a kernel holding
// the stream.
Options WithSync(Options o, StagingSync sync) {
  o.config->staging_sync = sync;
  return o;
}
Options WithSignals(Options o) { return WithSync(std::move(o), StagingSync::kSignals); }

// CUDA IPC calls order the ranks' streams with interprocess events
// (CHORUS_CUDA_IPC_SYNC=events) instead of flags, the default.
Options WithEvents(Options o) {
  o.config->cuda_ipc_sync = CudaIpcSync::kEvents;
  return o;
}

// Every stream-form call this communicator staged went with signal flags (none fell
// back to the semaphore).
Status CheckSignalled(const Communicator& comm) {
  const TrafficCounters c = comm.Counters();
  if (c.device_calls_signalled == 0) return InternalError("no call was staged with signal flags");
  return Status::Ok();
}

// The two ways a stream-form collective runs when every rank is on this host.
enum class Path { kCudaIpc, kStaged };
CudaIpcMode IpcSetting(Path p) { return p == Path::kCudaIpc ? CudaIpcMode::kAlways : CudaIpcMode::kOff; }

// The device-buffer collectives took `path` (in-place all_to_all always stages: CUDA IPC
// declines it).
Status CheckPath(const Communicator& comm, Path path) {
  const TrafficCounters c = comm.Counters();
  const std::string got =
      "ipc " + std::to_string(c.device_calls_ipc) + ", staged " + std::to_string(c.device_calls_staged);
  if (path == Path::kCudaIpc && c.device_calls_ipc == 0)
    return InternalError("no call went through CUDA IPC (" + got + ")");
  if (path == Path::kStaged && c.device_calls_ipc != 0) return InternalError("CHORUS_CUDA_IPC=off, yet " + got);
  return Status::Ok();
}

// Whether this rank asks for flags to order the ranks' streams in CUDA IPC calls and
// its driver has them (algos/cuda_ipc_sync.h).
bool WantsFlags(const Options& o) {
  return o.config->cuda_ipc_sync == CudaIpcSync::kFlags && cu::SignalFlags::DriverHasThem();
}

// Every CUDA IPC call of this communicator ordered the streams with flags (`flags`), or
// every one with interprocess events.
Status CheckIpcSync(const Communicator& comm, bool flags) {
  const TrafficCounters c = comm.Counters();
  if (c.device_calls_ipc_flags == (flags ? c.device_calls_ipc : 0)) return Status::Ok();
  return InternalError(std::to_string(c.device_calls_ipc_flags) + " of " + std::to_string(c.device_calls_ipc) +
                       " calls through CUDA IPC used flags; want " + (flags ? "all" : "none"));
}

// Every collective, dtype and op in turn, on device buffers in each rank.
int RotatingOnDevice(const Options& o, int rank, int n, bool stream_form, uint64_t salt, Path path = Path::kStaged) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Result<cu::Stream> stream = cu::Stream::Create();
  RANK_OK(stream.status());
  for (const ApiCase& c : testing::RotatingCases(n, salt, 60, (1 << 20) + 3)) {
    ApiCall call(c, rank, n);
    RANK_OK(call.RunOnDevice(**comm, stream_form ? stream.value().get() : nullptr));
    RANK_OK(call.Check());
  }
  RANK_OK(CheckPath(**comm, path));
  if (path == Path::kCudaIpc) RANK_OK(CheckIpcSync(**comm, WantsFlags(o)));
  if (o.config->staging_sync == StagingSync::kSignals && stream_form) RANK_OK(CheckSignalled(**comm));
  RANK_OK((*comm)->Shutdown());
  return 0;
}

TEST(DeviceApiTest, StreamFormTwoRanksCudaIpc) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o, r, 2, true, 11, Path::kCudaIpc); }, {120, {}}));
}

TEST(DeviceApiTest, StreamFormThreeRanksCudaIpc) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o, r, 3, true, 12, Path::kCudaIpc); }, {120, {}}));
}

// The streams ordered with interprocess events (CHORUS_CUDA_IPC_SYNC=events) rather than
// flags, the default.
TEST(DeviceApiTest, StreamFormCudaIpcWithEvents) {
  SKIP_WITHOUT_GPU();
  const Options o2 = WithEvents(TestOptions()), o3 = WithEvents(TestOptions());
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o2, r, 2, true, 51, Path::kCudaIpc); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o3, r, 3, true, 52, Path::kCudaIpc); }, {120, {}}));
}

// The path ranks on different hosts take (device -> host -> TCP -> host -> device).
TEST(DeviceApiTest, StreamFormTwoAndThreeRanksStagedOverTcp) {
  SKIP_WITHOUT_GPU();
  const Options o2 = TestOptions(CudaIpcMode::kOff), o3 = TestOptions(CudaIpcMode::kOff);
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o2, r, 2, true, 15, Path::kStaged); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o3, r, 3, true, 16, Path::kStaged); }, {120, {}}));
}

// Staged in windows of 16 KiB: a large all_reduce, broadcast or reduce runs as several
// collectives behind one semaphore (CHORUS_STAGING_SYNC=kernel), through pinned bounce buffers of
// the window's size (every collective in turn, then calls chained on one stream: one
// semaphore after another). Not smaller: on the H100, 4 KiB windows took 46 s, two processes
// taking turns on the GPU. Not with signal flags: each window's copies wait on the
// stream there, and each costs the processes a turn on the GPU (this test took over 120 s
// so on an H200); SignalFlagsInWindows runs them in 256 KiB windows.
int ChainedAllReduces(const Options& o, int rank, int n);
TEST(DeviceApiTest, StagedInSmallWindows) {
  SKIP_WITHOUT_GPU();
  Options o = WithSync(TestOptions(CudaIpcMode::kOff), StagingSync::kKernel),
          chained = WithSync(TestOptions(CudaIpcMode::kOff), StagingSync::kKernel);
  o.config->staging_window_bytes = 16 << 10;
  chained.config->staging_window_bytes = 16 << 10;
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o, r, 3, true, 31, Path::kStaged); }, {120, {}}));
  ExpectAllOk(RunRanks(2, [&](int r) { return ChainedAllReduces(chained, r, 2); }, {120, {}}));
}

// One rank turned CUDA IPC off: no rank uses it (the setting travels with the bootstrap),
// so both stage instead of meeting each other's other schedule.
TEST(DeviceApiTest, OneRankWithCudaIpcOffMakesEveryRankStage) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2,
                       [&](int r) {
                         Options mine = o;
                         mine.config->cuda_ipc = r == 0 ? CudaIpcMode::kOff : CudaIpcMode::kAuto;
                         return RotatingOnDevice(mine, r, 2, true, 18, Path::kStaged);
                       },
                       {120, {}}));
}

// The host forms given device pointers (inputs ready when called, results there on return).
TEST(DeviceApiTest, HostFormWithDevicePointersTwoAndThreeRanksCudaIpc) {
  SKIP_WITHOUT_GPU();
  const Options o2 = TestOptions(), o3 = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o2, r, 2, false, 13, Path::kCudaIpc); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o3, r, 3, false, 14, Path::kCudaIpc); }, {120, {}}));
}

TEST(DeviceApiTest, HostFormWithDevicePointersStaged) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions(CudaIpcMode::kOff);
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o, r, 2, false, 17, Path::kStaged); }, {120, {}}));
}

// Many calls back to back on one stream, with no host synchronisation between them: each
// all_reduce's input is the previous one's input plus its result (int64, exact), so a
// call that read a peer's buffer too early or too late (events reused across calls)
// gives a wrong number. Same buffers every time: the peers' mappings are reused.
int ChainedAllReduces(const Options& o, int rank, int n) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Result<cu::Stream> s = cu::Stream::Create();
  RANK_OK(s.status());
  void* stream = s.value().get();
  const size_t count = (256u << 10) + 3;
  const int iters = 24;
  auto a = cu::DeviceBuffer::Allocate(count * 8), b = cu::DeviceBuffer::Allocate(count * 8);
  RANK_OK(a.status());
  RANK_OK(b.status());
  // On the host, every rank's a: a_p[i] = p + 1 + i % 7; b = sum_p a_p; a_p += b.
  std::vector<std::vector<int64_t>> want(n, std::vector<int64_t>(count));
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < count; ++i) want[p][i] = p + 1 + static_cast<int64_t>(i % 7);
  }
  RANK_OK(cu::CopyToDevice(a.value().get(), want[rank].data(), count * 8));
  std::vector<Work> works;
  for (int k = 0; k < iters; ++k) {
    works.push_back((*comm)->AllReduce(a.value().get(), b.value().get(), count, DataType::kInt64, ReduceOp::kSum,
                                       CudaStream{stream}));
    RANK_OK(
        cu::Reduce(DataType::kInt64, ReduceOp::kSum, a.value().get(), a.value().get(), b.value().get(), count, stream));
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0;
      for (int p = 0; p < n; ++p) sum += want[p][i];
      for (int p = 0; p < n; ++p) want[p][i] += sum;
    }
  }
  for (Work& w : works) RANK_OK(w.Wait());
  RANK_OK(cu::Synchronize(stream));
  std::vector<int64_t> got(count);
  RANK_OK(cu::CopyToHost(got.data(), a.value().get(), count * 8));
  for (size_t i = 0; i < count; ++i) {
    RANK_CHECK(got[i] == want[rank][i], "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                                            std::to_string(want[rank][i]));
  }
  RANK_OK(CheckPath(**comm, o.config->cuda_ipc == CudaIpcMode::kOff ? Path::kStaged : Path::kCudaIpc));
  if (o.config->cuda_ipc != CudaIpcMode::kOff) {  // the same buffers every time: no call may decline
    const uint64_t ipc = (*comm)->Counters().device_calls_ipc;
    RANK_CHECK(ipc == iters, std::to_string(ipc) + " of " + std::to_string(iters) + " calls went through CUDA IPC");
    RANK_OK(CheckIpcSync(**comm, WantsFlags(o)));
  }
  RANK_OK((*comm)->Shutdown());
  return 0;
}

TEST(DeviceApiTest, ChainedCallsOnOneStreamCudaIpcTwoAndThreeRanks) {
  SKIP_WITHOUT_GPU();
  const Options o2 = TestOptions(), o3 = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int r) { return ChainedAllReduces(o2, r, 2); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return ChainedAllReduces(o3, r, 3); }, {120, {}}));
}

// Each rank's calls alternate between two streams of its own, and on ranks other than 0
// every other call's input is written behind a 2 ms kernel: the next call, on the other
// stream, signals long before. A later call's signals must not stand in for an earlier
// one's (a reader would see the input before the write, rank + 1 instead of rank + 2).
// More calls than the flags have slots (algos/cuda_ipc_sync.h), so slots are reused.
// `every_rank_flags`: every rank asks for flags (which this rank gets where its driver
// has them), else every rank gets events.
int CallsOnTwoStreams(const Options& o, int rank, int n, bool every_rank_flags) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Result<cu::Stream> s0 = cu::Stream::Create(), s1 = cu::Stream::Create();
  RANK_OK(s0.status());
  RANK_OK(s1.status());
  const size_t count = 4096;
  const int calls = 3 * static_cast<int>(algos::kSyncSlots) + 5;
  auto in = cu::DeviceBuffer::Allocate(calls * count * 4), out = cu::DeviceBuffer::Allocate(calls * count * 4);
  RANK_OK(in.status());
  RANK_OK(out.status());
  std::vector<float> host(calls * count, static_cast<float>(rank + 1));
  RANK_OK(cu::CopyToDevice(in.value().get(), host.data(), calls * count * 4));
  RANK_OK(cu::Memset(out.value().get(), 0, calls * count * 4));
  std::vector<Work> works;
  for (int k = 0; k < calls; ++k) {
    void* stream = (k % 2 == 0 ? s0 : s1).value().get();
    float* mine = static_cast<float*>(in.value().get()) + k * count;
    if (rank != 0 && k % 2 == 0) RANK_OK(testing::DelayOnDevice(2000, stream));
    RANK_OK(testing::AddOneOnDevice(mine, count, stream));
    works.push_back((*comm)->AllReduce(mine, static_cast<float*>(out.value().get()) + k * count, count,
                                       DataType::kFloat32, ReduceOp::kSum, CudaStream{stream}));
  }
  for (Work& w : works) RANK_OK(w.Wait());
  RANK_OK(cu::Synchronize(s0.value().get()));
  RANK_OK(cu::Synchronize(s1.value().get()));
  RANK_OK(cu::CopyToHost(host.data(), out.value().get(), calls * count * 4));
  const float want = static_cast<float>(n) * static_cast<float>(n + 3) / 2;  // sum of p + 2
  for (size_t i = 0; i < host.size(); ++i) {
    RANK_CHECK(host[i] == want, "call " + std::to_string(i / count) + " element " + std::to_string(i % count) +
                                    ": got " + std::to_string(host[i]) + ", want " + std::to_string(want));
  }
  RANK_OK(CheckPath(**comm, Path::kCudaIpc));
  RANK_OK(CheckIpcSync(**comm, every_rank_flags && WantsFlags(o)));
  RANK_OK((*comm)->Shutdown());
  return 0;
}

TEST(DeviceApiTest, CallsOnTwoStreamsWaitForTheirOwnSignals) {
  SKIP_WITHOUT_GPU();
  // (Whether the driver has flags is asked in the ranks: CUDA does not survive fork.)
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int r) { return CallsOnTwoStreams(o, r, 2, true); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return CallsOnTwoStreams(o, r, 3, true); }, {120, {}}));
  Options split = TestOptions();
  split.config->cuda_ipc_one_gpu = CudaIpcOneGpu::kSplit;  // MID too
  ExpectAllOk(RunRanks(2, [&](int r) { return CallsOnTwoStreams(split, r, 2, true); }, {120, {}}));
}

// One rank asks for events: every rank uses them.
TEST(DeviceApiTest, OneRankAskingForEventsMakesEveryRankUseThem) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2,
                       [&](int r) {
                         Options mine = o;
                         if (r == 1) mine.config->cuda_ipc_sync = CudaIpcSync::kEvents;
                         return CallsOnTwoStreams(mine, r, 2, false);
                       },
                       {120, {}}));
}

// With CHORUS_CUDA_IPC=auto, ranks that share one GPU without MPS, whose CUDA IPC calls
// order their streams with interprocess events (CHORUS_CUDA_IPC_SYNC=events), stage
// their host-form calls up to 1 MiB once a call through CUDA IPC showed it (their
// processes take turns on the GPU), and their stream-form calls up to 256 KiB where every
// rank stages those with signal flags; larger calls keep CUDA IPC. With flags (the
// default), or under MPS, every call goes through CUDA IPC.
int SmallCallsOnASharedGpu(const Options& o, int rank) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  const size_t small = 1000, medium = (512u << 10) / 4, large = (2u << 20) / 4;  // floats: 4000 B, 512 KiB, 2 MiB
  auto in = cu::DeviceBuffer::Allocate(large * 4), out = cu::DeviceBuffer::Allocate(large * 4);
  RANK_OK(in.status());
  RANK_OK(out.status());
  std::vector<float> host(large, static_cast<float>(rank + 1));
  RANK_OK(cu::CopyToDevice(in.value().get(), host.data(), large * 4));
  Result<cu::Stream> stream = cu::Stream::Create();
  RANK_OK(stream.status());
  const bool mps = cu::MpsEnabled();
  const bool signals = o.config->staging_sync == StagingSync::kSignals && cu::SignalFlags::DriverHasThem();
  const bool flags = WantsFlags(o);
  // (count, stream form, staged when time-sliced)
  const std::vector<std::tuple<size_t, bool, bool>> calls = {
      {small, false, false},  // the first goes through CUDA IPC: it finds the time slicing
      {small, false, true},   {large, false, false}, {small, false, true},
      {small, true, signals}, {medium, true, false}};
  uint64_t want_ipc = 0, want_staged = 0;
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto [count, stream_form, staged] = calls[k];
    RANK_OK(cu::Memset(out.value().get(), 0, count * 4));
    if (stream_form) {
      RANK_OK((*comm)
                  ->AllReduce(in.value().get(), out.value().get(), count, DataType::kFloat32, ReduceOp::kSum,
                              CudaStream{stream.value().get()})
                  .Wait());
    } else {
      RANK_OK((*comm)->AllReduce(in.value().get(), out.value().get(), count, DataType::kFloat32, ReduceOp::kSum));
    }
    std::vector<float> got(count);
    RANK_OK(cu::CopyToHost(got.data(), out.value().get(), count * 4));
    for (size_t i = 0; i < count; ++i) {
      RANK_CHECK(got[i] == 3.0f, "call " + std::to_string(k + 1) + " element " + std::to_string(i));
    }
    (staged && !mps && !flags ? want_staged : want_ipc) += 1;
    const TrafficCounters c = (*comm)->Counters();
    RANK_CHECK(c.device_calls_ipc == want_ipc && c.device_calls_staged == want_staged,
               "after call " + std::to_string(k + 1) + " (MPS " + std::to_string(mps) + ", " +
                   ModeName(o.config->staging_sync) + ", flags " + std::to_string(flags) + "): ipc " +
                   std::to_string(c.device_calls_ipc) + ", staged " + std::to_string(c.device_calls_staged) +
                   "; want ipc " + std::to_string(want_ipc) + ", staged " + std::to_string(want_staged));
  }
  RANK_OK((*comm)->Shutdown());
  return 0;
}

TEST(DeviceApiTest, SmallCallsOfRanksSharingAGpuWithEventsWithoutMpsAreStaged) {
  SKIP_WITHOUT_GPU();
  const Options o = WithEvents(TestOptions(CudaIpcMode::kAuto));  // signal flags, the default
  ExpectAllOk(RunRanks(2, [&](int rank) { return SmallCallsOnASharedGpu(o, rank); }));
}

// Behind the semaphore the stream form stays on CUDA IPC at every size (the semaphore's kernel
// would spin through the peer's turns).
TEST(DeviceApiTest, SmallStreamCallsBehindTheGateKeepCudaIpcOnASharedGpu) {
  SKIP_WITHOUT_GPU();
  const Options o = WithEvents(WithSync(TestOptions(CudaIpcMode::kAuto), StagingSync::kKernel));
  ExpectAllOk(RunRanks(2, [&](int rank) { return SmallCallsOnASharedGpu(o, rank); }));
}

// With flags (the default) ranks sharing a GPU keep CUDA IPC for calls of every size.
TEST(DeviceApiTest, CallsOfRanksSharingAGpuWithFlagsKeepCudaIpc) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions(CudaIpcMode::kAuto);
  ExpectAllOk(RunRanks(2, [&](int rank) { return SmallCallsOnASharedGpu(o, rank); }));
}

// These ranks share one GPU, so all_reduce through CUDA IPC runs led by rank 0 above;
// CHORUS_CUDA_IPC_ONE_GPU=split runs the split one (as across GPUs), on one rank only:
// every rank follows it.
TEST(DeviceApiTest, SplitAllReduceOnOneGpuWhenAnyRankAsks) {
  SKIP_WITHOUT_GPU();
  const Options o2 = TestOptions(), o3 = TestOptions();
  ExpectAllOk(RunRanks(2,
                       [&](int r) {
                         Options mine = o2;
                         if (r == 1) mine.config->cuda_ipc_one_gpu = CudaIpcOneGpu::kSplit;
                         return RotatingOnDevice(mine, r, 2, true, 23, Path::kCudaIpc);
                       },
                       {120, {}}));
  ExpectAllOk(RunRanks(3,
                       [&](int r) {
                         Options mine = o3;
                         if (r == 0) mine.config->cuda_ipc_one_gpu = CudaIpcOneGpu::kSplit;
                         return ChainedAllReduces(mine, r, 3);
                       },
                       {120, {}}));
}

TEST(DeviceApiTest, ChainedCallsOnOneStreamStaged) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions(CudaIpcMode::kOff);
  ExpectAllOk(RunRanks(2, [&](int r) { return ChainedAllReduces(o, r, 2); }, {120, {}}));
}

// The staged path with the semaphore wait kernel (CHORUS_STAGING_SYNC=kernel; the default, signal
// flags, runs in the tests above): every collective (2 and 3 ranks) and calls chained
// on one stream (StagedInSmallWindows runs it in windows).
TEST(DeviceApiTest, StagedWithTheGate) {
  SKIP_WITHOUT_GPU();
  const Options o = WithSync(TestOptions(CudaIpcMode::kOff), StagingSync::kKernel);
  ExpectAllOk(RunRanks(2, [&](int r) { return RotatingOnDevice(o, r, 2, true, 41, Path::kStaged); }, {120, {}}));
  ExpectAllOk(RunRanks(3, [&](int r) { return RotatingOnDevice(o, r, 3, true, 42, Path::kStaged); }, {120, {}}));
  ExpectAllOk(RunRanks(2, [&](int r) { return ChainedAllReduces(o, r, 2); }, {120, {}}));
}

// Signal flags (the default) in 256 KiB windows, calls chained on one stream: 8 windows
// a call, each its own flags and LANDED step (not 16 KiB: see StagedInSmallWindows).
TEST(DeviceApiTest, SignalFlagsInWindows) {
  SKIP_WITHOUT_GPU();
  Options o = WithSignals(TestOptions(CudaIpcMode::kOff));
  o.config->staging_window_bytes = 256 << 10;
  ExpectAllOk(RunRanks(2, [&](int r) { return ChainedAllReduces(o, r, 2); }, {120, {}}));
}

// Under CUDA's lazy loading, a kernel's first launch loads it under the context's lock
// and waits for the device to drain. While a staged call holds its stream behind the
// semaphore wait kernel, that wait lasts until the call's timeout (its task's copies wait for
// the lock); with signal flags the task makes no CUDA call, so the call completes and
// the kernel runs. Rank 1 joins a second late, so rank 0's call is in flight, its
// stream waiting, when rank 0 launches the test's own kernel for the first time.
TEST(DeviceApiTest, SignalFlagsLetAKernelsFirstLaunchThroughDuringAStagedCall) {
  SKIP_WITHOUT_GPU();
  Options o = WithSignals(TestOptions(CudaIpcMode::kOff));
  o.config->timeout_ms = 20000;  // the semaphore wait kernel would hold rank 0 this long, then fail the call
  ExpectAllOk(RunRanks(
      2,
      [&](int rank) {
        if (!cu::LazyLoading()) {
          std::printf("rank %d: CUDA loads kernels eagerly here (CUDA_MODULE_LOADING): nothing to check\n", rank);
          return 0;
        }
        auto comm = Communicator::Create(o);
        RANK_OK(comm.status());
        Result<cu::Stream> s = cu::Stream::Create(), other = cu::Stream::Create();
        RANK_OK(s.status());
        RANK_OK(other.status());
        const size_t n = (1u << 20) + 1;
        auto in = cu::DeviceBuffer::Allocate(n * 4), out = cu::DeviceBuffer::Allocate(n * 4),
             mine = cu::DeviceBuffer::Allocate(n * 4);
        RANK_OK(in.status());
        RANK_OK(out.status());
        RANK_OK(mine.status());
        std::vector<float> host(n, static_cast<float>(rank + 1));
        RANK_OK(cu::CopyToDevice(in.value().get(), host.data(), n * 4));
        RANK_OK(cu::CopyToDevice(mine.value().get(), host.data(), n * 4));
        if (rank == 1) usleep(1000 * 1000);
        Work w = (*comm)->AllReduce(in.value().get(), out.value().get(), n, DataType::kFloat32, ReduceOp::kSum,
                                    CudaStream{s.value().get()});
        if (rank == 0)
          RANK_OK(testing::AddOneOnDevice(static_cast<float*>(mine.value().get()), n, other.value().get()));
        RANK_OK(w.Wait());
        RANK_OK(cu::Synchronize(s.value().get()));
        RANK_OK(cu::Synchronize(other.value().get()));
        std::vector<float> got(n), added(n);
        RANK_OK(cu::CopyToHost(got.data(), out.value().get(), n * 4));
        RANK_OK(cu::CopyToHost(added.data(), mine.value().get(), n * 4));
        for (size_t i = 0; i < n; ++i) {
          RANK_CHECK(got[i] == 3.0f, "all_reduce element " + std::to_string(i) + ": " + std::to_string(got[i]));
          RANK_CHECK(added[i] == rank + 1.0f + (rank == 0 ? 1.0f : 0.0f), "kernel element " + std::to_string(i));
        }
        RANK_OK(CheckSignalled(**comm));
        RANK_OK((*comm)->Shutdown());
        return 0;
      },
      {90, {}}));
}

// A kernel enqueued before the call must finish before the call reads its input; work
// enqueued right after the call returns must see the result. Before: the input is
// doubled in place by a reduction kernel (x + x). After: the result is copied to a
// third buffer on the same stream, and that copy is what is checked.
// Both paths, on a stream of the test's and on the legacy default stream (CudaStream{});
// the staged one with signal flags (the default) and with the semaphore.
class StreamOrderTest : public ::testing::TestWithParam<std::tuple<Path, bool, bool>> {};

TEST_P(StreamOrderTest, BeforeAndAfter) {
  SKIP_WITHOUT_GPU();
  const Path path = std::get<0>(GetParam());
  const bool legacy = std::get<1>(GetParam());
  const bool signals = std::get<2>(GetParam());
  const Options o = WithSync(TestOptions(IpcSetting(path)), signals ? StagingSync::kSignals : StagingSync::kKernel);
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Result<cu::Stream> s = cu::Stream::Create();
    RANK_OK(s.status());
    void* stream = legacy ? nullptr : s.value().get();
    const size_t n = (4u << 20) + 5;  // floats: big enough that the kernel and copies take a while
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i % 1000) + rank);
    auto in = cu::DeviceBuffer::Allocate(n * 4), out = cu::DeviceBuffer::Allocate(n * 4),
         after = cu::DeviceBuffer::Allocate(n * 4);
    RANK_OK(in.status());
    RANK_OK(out.status());
    RANK_OK(after.status());
    RANK_OK(cu::CopyToDevice(in.value().get(), host.data(), n * 4));
    RANK_OK(cu::Memset(out.value().get(), 0xff, n * 4));
    RANK_OK(cu::Memset(after.value().get(), 0xff, n * 4));
    RANK_OK(cu::Synchronize(nullptr));  // the memsets ran on the legacy stream, which `stream` does not wait for
    RANK_OK(cu::Reduce(DataType::kFloat32, ReduceOp::kSum, in.value().get(), in.value().get(), in.value().get(), n,
                       stream));
    Work w = (*comm)->AllReduce(in.value().get(), out.value().get(), n, DataType::kFloat32, ReduceOp::kSum,
                                CudaStream{stream});
    RANK_OK(cu::CopyDeviceToDevice(after.value().get(), out.value().get(), n * 4, stream));
    RANK_OK(w.Wait());
    RANK_OK(cu::Synchronize(stream));
    std::vector<float> got(n);
    RANK_OK(cu::CopyToHost(got.data(), after.value().get(), n * 4));
    for (size_t i = 0; i < n; ++i) {
      const float want = 2.0f * static_cast<float>(i % 1000) * 2 + 2.0f * (0 + 1);  // 2x(v+0) + 2x(v+1)
      RANK_CHECK(got[i] == want,
                 "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want));
    }
    RANK_OK(CheckPath(**comm, path));
    if (signals) RANK_OK(CheckSignalled(**comm));
    RANK_OK((*comm)->Shutdown());
    return 0;
  }));
}

INSTANTIATE_TEST_SUITE_P(
    BothPaths, StreamOrderTest,
    ::testing::Values(std::make_tuple(Path::kCudaIpc, false, false), std::make_tuple(Path::kCudaIpc, true, false),
                      std::make_tuple(Path::kStaged, false, false), std::make_tuple(Path::kStaged, true, false),
                      std::make_tuple(Path::kStaged, false, true), std::make_tuple(Path::kStaged, true, true)),
    [](const ::testing::TestParamInfo<std::tuple<Path, bool, bool>>& i) {
      const bool ipc = std::get<0>(i.param) == Path::kCudaIpc;
      const char* sync = ipc ? "" : std::get<2>(i.param) ? "Signals" : "Gate";
      return std::string(ipc ? "CudaIpc" : "Staged") + (std::get<1>(i.param) ? "LegacyStream" : "OwnStream") + sync;
    });

// Send/Recv of device buffers: the blocking host forms and the stream forms.
TEST(DeviceApiTest, SendRecvDeviceBuffers) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    Result<cu::Stream> s = cu::Stream::Create();
    RANK_OK(s.status());
    const int peer = 1 - rank;
    for (size_t bytes : {size_t{1}, size_t{4099}, size_t{(3u << 20) + 1}}) {
      for (bool stream_form : {false, true}) {
        std::vector<uint8_t> mine(bytes), got(bytes, 0);
        for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(i * 7 + rank * 3 + bytes);
        auto dsend = cu::DeviceBuffer::Allocate(bytes), drecv = cu::DeviceBuffer::Allocate(bytes);
        RANK_OK(dsend.status());
        RANK_OK(drecv.status());
        RANK_OK(cu::CopyToDevice(dsend.value().get(), mine.data(), bytes));
        // Rank 0 sends first, rank 1 receives first: blocking sends may wait for their receive.
        for (int turn = 0; turn < 2; ++turn) {
          const bool send_now = (turn == 0) == (rank == 0);
          if (stream_form) {
            CudaStream cs{s.value().get()};
            RANK_OK(send_now ? c.Send(dsend.value().get(), bytes, peer, cs, 5).Wait()
                             : c.Recv(drecv.value().get(), bytes, peer, cs, 5).Wait());
          } else {
            RANK_OK(send_now ? c.Send(dsend.value().get(), bytes, peer, 5)
                             : c.Recv(drecv.value().get(), bytes, peer, 5));
          }
        }
        RANK_OK(cu::Synchronize(s.value().get()));
        RANK_OK(cu::CopyToHost(got.data(), drecv.value().get(), bytes));
        for (size_t i = 0; i < bytes; ++i) {
          RANK_CHECK(got[i] == static_cast<uint8_t>(i * 7 + peer * 3 + bytes),
                     "byte " + std::to_string(i) + " of " + std::to_string(bytes));
        }
      }
    }
    RANK_OK(c.Shutdown());
    return 0;
  }));
}

// Misuse is an error that says what was wrong, and the communicator stays usable.
TEST(DeviceApiTest, MixedHostAndDeviceBuffersAreErrors) {
  SKIP_WITHOUT_GPU();
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    std::vector<float> host(64, 1.0f);
    auto dev = cu::DeviceBuffer::Allocate(64 * 4);
    RANK_OK(dev.status());
    Status st = c.AllReduce(host.data(), dev.value().get(), 64, DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument, st.ToString());
    RANK_CHECK(st.message().find("host memory") != std::string::npos &&
                   st.message().find("device memory") != std::string::npos,
               st.ToString());
    st = c.AllReduce(host.data(), host.data(), 64, DataType::kFloat32, ReduceOp::kSum, CudaStream{}).Wait();
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("CUDA-stream form") != std::string::npos,
               st.ToString());
    st = c.ISend(dev.value().get(), 256, 1 - rank).Wait();
    RANK_CHECK(st.code() == StatusCode::kInvalidArgument && st.message().find("device memory") != std::string::npos,
               st.ToString());
    // Still usable: nothing above took a sequence number or touched the peer.
    RANK_OK(c.AllReduce(host.data(), host.data(), 64, DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(host[0] == 2.0f, "host all_reduce after the errors");
    RANK_OK(c.Shutdown());
    return 0;
  }));
}

// Where no GPU is usable the stream forms fail at once, naming the reason, and the
// communicator goes on working with host buffers.
TEST(DeviceApiTest, WithoutGpuStreamFormsSayNoCudaDevice) {
  if (GpuProbe().first) GTEST_SKIP() << "a GPU is present (" << GpuProbe().second << ")";
  const Options o = TestOptions();
  ExpectAllOk(RunRanks(2, [&](int rank) {
    auto comm = Communicator::Create(o);
    RANK_OK(comm.status());
    Communicator& c = **comm;
    std::vector<float> buf(16, 1.0f);
    Status st = c.AllReduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::kSum, CudaStream{}).Wait();
    RANK_CHECK(st.code() == StatusCode::kUnavailable && st.message().find("no CUDA device") != std::string::npos,
               st.ToString());
    // A CPU-only build names that reason too (docs/design/cuda_optional.md).
    RANK_CHECK(cu::BuiltWithCuda() || st.message().find("chorus was built without CUDA") != std::string::npos,
               st.ToString());
    st = c.Send(buf.data(), 64, 1 - rank, CudaStream{}).Wait();
    RANK_CHECK(st.code() == StatusCode::kUnavailable, st.ToString());
    RANK_OK(c.AllReduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(buf[0] == 2.0f, "host all_reduce after the refused stream calls");
    RANK_OK(c.Shutdown());
    return 0;
  }));
}

// A CPU-only build has no CUDA IPC: each of its calls says so, naming what was asked.
TEST(DeviceApiTest, CpuOnlyBuildRefusesCudaIpc) {
  if (cu::BuiltWithCuda()) GTEST_SKIP() << "built with CUDA";
  namespace ipc = transport::cuda_ipc;
  int x = 0;
  for (const Status& st : {ipc::CurrentDevice().status(), ipc::Export(&x).status(), ipc::IpcEvent::Create().status(),
                           ipc::IpcFlags::Create(2).status(), ipc::CopyAsync(&x, &x, 4, nullptr)}) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_EQ(st.message().rfind("chorus was built without CUDA: ", 0), 0u) << st.ToString();
  }
}

}  // namespace
}  // namespace chorus
