// One collective call through the public API as the tests drive it: one rank's fresh
// inputs (tests/algos/typed_values.h), the call (blocking or I-form), and the check
// of its outputs against the scalar reference. The sweep, async, Split and
// CHORUS_ALGO tests all run these, in forked ranks (tests/util/multiproc.h).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "algos/fingerprint.h"
#include "chorus/communicator.h"
#include "tests/algos/typed_values.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {

// Every dtype and op, for sweeps.
constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

// Options for a test's ranks: a fresh file:// rendezvous and the process's configuration
// (so CHORUS_* applies: the RDMA channel's CHORUS_TRANSPORT=rdma reaches every test) with
// the given deadlines.
Options FileInitOptions(int64_t timeout_ms = 20000, int64_t connect_timeout_ms = 20000);

struct ApiCase {
  algos::Collective kind = algos::Collective::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  bool in_place = false;
  int root = 0;
  uint64_t seed = 0;
  // With count 0: pass null buffers (the API accepts them then).
  bool null_when_empty = false;

  // "reduce(count=7, int8, avg, root=2) in-place seed=..."
  std::string Describe() const;
};

// One rank's buffers for a case, filled with this rank's inputs on construction.
class ApiCall {
 public:
  ApiCall(const ApiCase& c, int rank, int size);
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;

  Status Run(Communicator& comm);  // the blocking form
  Work Post(Communicator& comm);   // the I-form: this object must outlive the Work
  // On device buffers laid out like the host ones (inputs and poisoned outputs copied
  // over, results copied back for Check()): the CUDA-stream form on `stream` (waited
  // for), or with stream == nullptr the host form given device pointers.
  // `before` runs on the stream after the inputs were copied and before the call
  // (a kernel the call must wait for); `after` right after the call returns (work
  // that must see the result). Both get the device send and recv pointers.
  using DeviceHook = Status (*)(const ApiCase& c, void* dsend, void* drecv, void* stream);
  Status RunOnDevice(Communicator& comm, void* stream, DeviceHook before = nullptr, DeviceHook after = nullptr);
  // The outputs against the reference, and the send buffer left as it was; the
  // error names the case and the rank.
  Status Check() const;
  const ApiCase& spec() const { return c_; }
  // Where this rank's result is (null where it gets none).
  const void* recv() const { return recv_; }

 private:
  Status Fail(const Status& st) const;
  Status RunOn(Communicator& comm, const void* send, void* recv) const;  // the blocking form
  ApiCase c_;
  int rank_;
  int size_;
  TypedBuffer in_;
  TypedBuffer out_;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
};

// `how_many` cases that cycle through every collective (barrier included), dtype
// and op, with counts from {0, 1, 7, n-1, 1023, 4099, big}, both placements and
// roots counted down from n-1; inputs seeded from `salt` and the index. `big` is
// the count of the largest ones (0: none).
std::vector<ApiCase> RotatingCases(int n, uint64_t salt, int how_many, size_t big = 0);

}  // namespace chorus::testing
