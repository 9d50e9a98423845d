// Element types and reduction operations, named as PyTorch users know them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace chorus {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUint8,
  kInt32,
  kInt64,
};
constexpr int kNumDataTypes = 8;

enum class ReduceOp : uint8_t { kSum = 0, kProd, kMax, kMin, kAvg };
constexpr int kNumReduceOps = 5;

size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);   // "float32", "float64", "float16", "bfloat16", "int8", ...
const char* ReduceOpName(ReduceOp op);  // "sum", "prod", "max", "min", "avg"
// Accepts the names above and the usual aliases ("float", "half", "bf16", "fp32", "int", "double", ...).
Result<DataType> ParseDataType(const std::string& name);
Result<ReduceOp> ParseReduceOp(const std::string& name);

// What a communicator's transport counted since it was created, for diagnostics.
struct TrafficCounters {
  // Messages that arrived before their receive was posted and waited in a buffer of
  // the transport until it was: each costs a second copy of its bytes (and memory
  // while it waits). The algorithms post their receives early to keep these rare.
  uint64_t early_messages = 0;
  uint64_t early_bytes = 0;
  // Large messages this rank read straight out of the sender's memory (shared memory's
  // single copy), not streamed to it through a ring.
  uint64_t read_messages = 0;
  // Pieces of such messages this rank wrote into its reader's buffer, helping it read.
  uint64_t written_pieces = 0;
  // Calls on device buffers (every form), by the way they ran: through CUDA IPC (ranks
  // of one host reading each other's buffers), or staged through host memory.
  uint64_t device_calls_ipc = 0;
  uint64_t device_calls_staged = 0;
  // Of the CUDA IPC ones, those whose streams ordered each other with flags of device
  // memory (CHORUS_CUDA_IPC_SYNC=flags) rather than interprocess events.
  uint64_t device_calls_ipc_flags = 0;
  // Of the staged ones, the stream-form calls staged with signal flags
  // (CHORUS_STAGING_SYNC=signals) rather than behind the semaphore wait kernel.
  uint64_t device_calls_signalled = 0;
};

}  // namespace chorus
