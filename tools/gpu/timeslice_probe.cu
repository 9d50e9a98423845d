// How long two processes that share one GPU take to hand the GPU's work to each other,
// by each way a CUDA IPC call could order their streams. chorus's all_reduce through
// CUDA IPC on one GPU needs, per call, rank 1's stream to say READY, rank 0's stream to
// wait for it, do the work and say DONE, and rank 1's stream to wait for that. Without
// MPS the two processes take turns on the GPU, and that handover costs a fixed ~0.29 ms a
// call on an H200 (chorus's CUDA IPC bar is missed there by it). A round here is that
// handover, rank 0's work being a kernel that copies --bytes, ordered by:
//   events  interprocess events, with a host message after each record (what chorus
//           does: an event is recorded again only after the peer's stream wait took it);
//   words   32-bit words in host memory both processes map (shared, cudaHostRegister'd),
//           written and waited for by the streams themselves (cuStreamWriteValue32,
//           cuStreamWaitValue32 >=): no host message, no event;
//   dwords  the same words in rank 0's device memory, which rank 1 maps through CUDA
//           IPC (cudaIpcGetMemHandle): no shared host memory to manage;
//   alone   rank 0's copies with no peer at all (the floor).
// Prints "probe <mechanism> <us per round>" for each, and exits 0 if every round ran.
// usage: timeslice_probe [--rounds N] [--bytes B]   (two processes, forked here; at most 60 s)
#include <cuda.h>  // types only: the driver's entry points are looked up at run time
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/stream_ops.h"

namespace {

using ValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct Options {
  int rounds = 200;
  size_t bytes = 64 << 10;
};

// Every failure ends the process with a message naming the call.
void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "timeslice_probe: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(2);
}
void CheckDriver(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "timeslice_probe: %s failed with CUresult %d\n", what, static_cast<int>(r));
  std::exit(2);
}

// One byte to the peer, or from it (the host messages of "events", and the barriers).
void Put(int fd, char c) {
  if (write(fd, &c, 1) != 1) {
    std::perror("timeslice_probe: write to the peer");
    std::exit(2);
  }
}
char Get(int fd) {
  char c = 0;
  if (read(fd, &c, 1) != 1) {
    std::fprintf(stderr, "timeslice_probe: the peer went away\n");
    std::exit(2);
  }
  return c;
}
void Barrier(int fd) {
  Put(fd, 'b');
  Get(fd);
}

double Seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Rank {
  int rank = 0;
  int fd = -1;  // the socket to the peer
  cudaStream_t stream = nullptr;
  void *src = nullptr, *dst = nullptr;
  volatile uint32_t* words = nullptr;  // [0] READY (rank 1 writes), [1] DONE (rank 0 writes)
  CUdeviceptr device_words = 0;
  ValueFn write_value = nullptr, wait_value = nullptr;
};

// Rank 0's work in a round: a kernel copying `bytes` (in place of a reduction: on the SMs,
// not a copy engine).
__global__ void CopyKernel(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

void Work(const Rank& r, const Options& o) {
  const size_t n = o.bytes / sizeof(uint4);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 1024));
  CopyKernel<<<blocks == 0 ? 1 : blocks, 256, 0, r.stream>>>(static_cast<const uint4*>(r.src),
                                                             static_cast<uint4*>(r.dst), n);
  Check(cudaGetLastError(), "the copy kernel's launch");
}

double Events(Rank& r, const Options& o, int rounds) {
  cudaEvent_t mine;
  Check(cudaEventCreateWithFlags(&mine, cudaEventDisableTiming | cudaEventInterprocess), "cudaEventCreate");
  cudaIpcEventHandle_t handle, theirs_handle;
  Check(cudaIpcGetEventHandle(&handle, mine), "cudaIpcGetEventHandle");
  if (write(r.fd, &handle, sizeof(handle)) != sizeof(handle) ||
      read(r.fd, &theirs_handle, sizeof(theirs_handle)) != sizeof(theirs_handle)) {
    std::fprintf(stderr, "timeslice_probe: exchanging event handles failed\n");
    std::exit(2);
  }
  cudaEvent_t theirs;
  Check(cudaIpcOpenEventHandle(&theirs, theirs_handle), "cudaIpcOpenEventHandle");
  Barrier(r.fd);
  const double t0 = Seconds();
  for (int k = 0; k < rounds; ++k) {
    if (r.rank == 1) {
      Check(cudaEventRecord(mine, r.stream), "cudaEventRecord READY");  // our inputs are written
      Put(r.fd, 'r');
      Get(r.fd);  // rank 0 recorded DONE
      Check(cudaStreamWaitEvent(r.stream, theirs, 0), "cudaStreamWaitEvent DONE");
    } else {
      Get(r.fd);  // rank 1 recorded READY
      Check(cudaStreamWaitEvent(r.stream, theirs, 0), "cudaStreamWaitEvent READY");
      Work(r, o);
      Check(cudaEventRecord(mine, r.stream), "cudaEventRecord DONE");
      Put(r.fd, 'd');
    }
  }
  Check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  const double t = Seconds() - t0;
  Barrier(r.fd);
  cudaEventDestroy(theirs);
  cudaEventDestroy(mine);
  return t;
}

// Rounds ordered by two words at `words` (READY, DONE), values base+1 .. base+rounds.
double Words(Rank& r, const Options& o, CUdeviceptr words, int rounds, uint32_t base) {
  Barrier(r.fd);
  const double t0 = Seconds();
  const CUstream s = static_cast<CUstream>(r.stream);
  const CUdeviceptr ready = words, done = words + sizeof(uint32_t);
  for (int k = 1; k <= rounds; ++k) {
    const uint32_t v = base + static_cast<uint32_t>(k);
    if (r.rank == 1) {
      CheckDriver(r.write_value(s, ready, v, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32 READY");
      CheckDriver(r.wait_value(s, done, v, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32 DONE");
    } else {
      CheckDriver(r.wait_value(s, ready, v, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32 READY");
      Work(r, o);
      CheckDriver(r.write_value(s, done, v, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32 DONE");
    }
  }
  Check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  const double t = Seconds() - t0;
  Barrier(r.fd);
  return t;
}

// Two words in rank 0's device memory, zeroed, as both ranks' streams address them
// (rank 1 through CUDA IPC). Kept until the process ends.
CUdeviceptr DeviceWords(const Rank& r) {
  void* p = nullptr;
  cudaIpcMemHandle_t handle;
  if (r.rank == 0) {
    Check(cudaMalloc(&p, 2 * sizeof(uint32_t)), "cudaMalloc of the device words");
    Check(cudaMemset(p, 0, 2 * sizeof(uint32_t)), "cudaMemset of the device words");
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Check(cudaIpcGetMemHandle(&handle, p), "cudaIpcGetMemHandle");
    if (write(r.fd, &handle, sizeof(handle)) != sizeof(handle)) {
      std::fprintf(stderr, "timeslice_probe: sending the words' handle failed\n");
      std::exit(2);
    }
  } else {
    if (read(r.fd, &handle, sizeof(handle)) != sizeof(handle)) {
      std::fprintf(stderr, "timeslice_probe: receiving the words' handle failed\n");
      std::exit(2);
    }
    Check(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  }
  return reinterpret_cast<CUdeviceptr>(p);
}

double Alone(Rank& r, const Options& o, int rounds) {
  Barrier(r.fd);
  const double t0 = Seconds();
  if (r.rank == 0) {
    for (int k = 0; k < rounds; ++k) Work(r, o);
  }
  Check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  const double t = Seconds() - t0;
  Barrier(r.fd);
  return t;
}

int RunRank(int rank, int fd, void* shared, const Options& o) {
  Rank r;
  r.rank = rank;
  r.fd = fd;
  Check(cudaSetDevice(0), "cudaSetDevice(0)");
  Check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Check(cudaMalloc(&r.src, o.bytes), "cudaMalloc");
  Check(cudaMalloc(&r.dst, o.bytes), "cudaMalloc");
  Check(cudaHostRegister(shared, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable),
        "cudaHostRegister of the shared words");
  void* dev = nullptr;
  Check(cudaHostGetDevicePointer(&dev, shared, 0), "cudaHostGetDevicePointer");
  r.words = static_cast<volatile uint32_t*>(shared);
  r.device_words = reinterpret_cast<CUdeviceptr>(dev);
  r.write_value = reinterpret_cast<ValueFn>(chorus::kernels::cuda::DriverFunction("cuStreamWriteValue32"));
  r.wait_value = reinterpret_cast<ValueFn>(chorus::kernels::cuda::DriverFunction("cuStreamWaitValue32"));
  const int warm = 20;
  const bool mps = chorus::kernels::cuda::MpsEnabled();
  auto report = [&](const char* what, double seconds, int rounds) {
    if (rank == 0) {
      std::printf("probe %-7s %9.1f us per round (%d rounds, %zu B copy, MPS %s)\n", what, seconds * 1e6 / rounds,
                  rounds, o.bytes, mps ? "on" : "off");
      std::fflush(stdout);  // a later mechanism that hangs is killed: what came before stays
    }
  };
  Events(r, o, warm);
  report("events", Events(r, o, o.rounds), o.rounds);
  if (r.write_value == nullptr || r.wait_value == nullptr) {
    if (rank == 0) std::printf("probe words   skipped: the driver has no stream memory operations\n");
    std::fflush(stdout);
  } else {
    Words(r, o, r.device_words, warm, 0);
    report("words", Words(r, o, r.device_words, o.rounds, warm), o.rounds);
    const CUdeviceptr dwords = DeviceWords(r);
    Words(r, o, dwords, warm, 0);
    report("dwords", Words(r, o, dwords, o.rounds, warm), o.rounds);
  }
  Alone(r, o, warm);
  report("alone", Alone(r, o, o.rounds), o.rounds);
  std::fflush(stdout);
  cudaHostUnregister(shared);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) {
      o.rounds = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--bytes") == 0) {
      o.bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: timeslice_probe [--rounds N] [--bytes B]\n");
      return 2;
    }
  }
  if (o.rounds < 1 || o.bytes < 1) {
    std::fprintf(stderr, "timeslice_probe: --rounds and --bytes must be positive\n");
    return 2;
  }
  // Before any CUDA call: the words page both processes map, and their socket.
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int fds[2];
  if (shared == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    std::perror("timeslice_probe: mmap or socketpair");
    return 2;
  }
  std::memset(shared, 0, 4096);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] == 0) {
      close(fds[1 - rank]);
      std::_Exit(RunRank(rank, fds[rank], shared, o));
    }
  }
  close(fds[0]);
  close(fds[1]);
  // Both ranks, for at most a minute: a stream left waiting for a word that a dead peer
  // never writes would otherwise hold its process for ever.
  int rc = 0, left = 0;
  for (pid_t p : pids) left += p > 0 ? 1 : 0;
  if (left < 2) rc = 1;
  const double deadline = Seconds() + 60;
  while (left > 0 && Seconds() < deadline) {
    int status = 0;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    } else {
      usleep(10000);
    }
  }
  if (left > 0) {
    std::fprintf(stderr, "timeslice_probe: still running after 60 s, stopped\n");
    for (pid_t p : pids) {
      if (p > 0) kill(p, SIGKILL);
    }
    while (waitpid(-1, nullptr, 0) > 0) {
    }
    rc = 1;
  }
  return rc;
}
