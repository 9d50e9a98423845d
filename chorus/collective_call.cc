#include "chorus/collective_call.h"

#include <algorithm>
#include <limits>

#include <cstring>

#include "algos/agreement.h"
#include "algos/barrier.h"
#include "algos/buffer.h"
#include "algos/context.h"

namespace chorus::internal {

using algos::Collective;

size_t CollectiveCall::bytes(int world_size) const {
  size_t b = count * DataTypeSize(dtype);
  switch (kind) {
    case Collective::kAllGather:
    case Collective::kGather:
    case Collective::kReduceScatter:
    case Collective::kScatter:
    case Collective::kAllToAll: return b * static_cast<size_t>(world_size);
    default: return b;
  }
}

std::string CallName(const CollectiveCall& call, int rank) {
  return std::string(algos::CollectiveName(call.kind)) + " on rank " + std::to_string(rank);
}

size_t WindowElems(const CollectiveCall& call, size_t window_bytes) {
  const bool elementwise =
      call.kind == Collective::kAllReduce || call.kind == Collective::kBroadcast || call.kind == Collective::kReduce;
  const size_t es = DataTypeSize(call.dtype);
  if (!elementwise || window_bytes == 0 || call.count * es <= window_bytes) return call.count;
  return window_bytes / es > 0 ? window_bytes / es : 1;
}

std::vector<CollectiveCall> StagingWindows(const CollectiveCall& call, size_t window_bytes) {
  const size_t per = WindowElems(call, window_bytes), es = DataTypeSize(call.dtype);
  if (per >= call.count) return {call};
  std::vector<CollectiveCall> windows;
  for (size_t first = 0; first < call.count; first += per) {
    CollectiveCall w = call;
    w.count = call.count - first < per ? call.count - first : per;
    // A buffer a rank does not use (a reduce's recv off the root) stays null.
    if (call.send != nullptr) w.send = static_cast<const char*>(call.send) + first * es;
    if (call.recv != nullptr) w.recv = static_cast<char*>(call.recv) + first * es;
    windows.push_back(w);
  }
  return windows;
}

DeviceIo CallIo(const CollectiveCall& call, int rank, int world_size) {
  const size_t b = call.count * DataTypeSize(call.dtype);
  const size_t all = b * static_cast<size_t>(world_size);
  const bool root = rank == call.root;
  size_t in = b, out = b;
  switch (call.kind) {
    case Collective::kAllReduce: break;
    // One buffer (send == recv): the root's input, everyone's output.
    case Collective::kBroadcast: in = root ? b : 0; break;
    case Collective::kReduce: out = root ? b : 0; break;
    case Collective::kAllGather: out = all; break;
    case Collective::kReduceScatter: in = all; break;
    case Collective::kGather: out = root ? all : 0; break;
    case Collective::kScatter: in = root ? all : 0; break;
    case Collective::kAllToAll: in = out = all; break;
    case Collective::kBarrier: in = out = 0; break;
  }
  return DeviceIo{call.send, in, call.recv, out};
}

Status CheckSize(const CollectiveCall& call, int world_size) {
  // The largest buffer a rank touches is count * n elements (the gathers, scatters and
  // all_to_all): its size in bytes must fit, or every offset computed from it wraps.
  const size_t es = DataTypeSize(call.dtype), n = static_cast<size_t>(std::max(world_size, 1));
  if (call.count <= std::numeric_limits<size_t>::max() / es / n) return Status::Ok();
  return InvalidArgument("count " + std::to_string(call.count) + " of " + DataTypeName(call.dtype) + " on " +
                         std::to_string(world_size) + " ranks is more bytes than memory can address");
}

Status Validate(const CollectiveCall& call, int rank, int world_size) {
  // The call's name only where something is wrong (every call comes through here).
  const auto what = [&] { return CallName(call, rank); };
  if (static_cast<int>(call.dtype) >= kNumDataTypes) {
    return InvalidArgument(what() + ": dtype " + std::to_string(static_cast<int>(call.dtype)) + " is not a DataType");
  }
  if (static_cast<int>(call.op) >= kNumReduceOps) {
    return InvalidArgument(what() + ": op " + std::to_string(static_cast<int>(call.op)) + " is not a ReduceOp");
  }
  if (algos::IsRooted(call.kind) && (call.root < 0 || call.root >= world_size)) {
    return InvalidArgument(what() + ": root " + std::to_string(call.root) +
                           " is not a rank of this communicator (size " + std::to_string(world_size) + ")");
  }
  if (call.count == 0 || call.kind == Collective::kBarrier) return Status::Ok();
  if (Status st = CheckSize(call, world_size); !st.ok()) return st.WithContext(what());
  const bool is_root = rank == call.root;
  bool needs_send = true, needs_recv = true;
  switch (call.kind) {
    // In place one buffer, recv; out of place the root's input too, apart from recv.
    case Collective::kBroadcast: needs_send = is_root && call.send != call.recv; break;
    case Collective::kReduce: needs_recv = is_root; break;
    case Collective::kGather: needs_recv = is_root; break;
    case Collective::kScatter: needs_send = is_root; break;
    default: break;
  }
  if (needs_send && call.send == nullptr) {
    return InvalidArgument(what() + ": send buffer is null with count " + std::to_string(call.count));
  }
  if (needs_recv && call.recv == nullptr) {
    return InvalidArgument(what() + ": recv buffer is null with count " + std::to_string(call.count));
  }
  // The root's output is written while its input is still being sent from.
  if (call.kind == Collective::kBroadcast && needs_send) {
    const auto* s = static_cast<const char*>(call.send);
    const auto* r = static_cast<const char*>(call.recv);
    const size_t bytes = call.count * DataTypeSize(call.dtype);
    if (s < r + bytes && r < s + bytes) {
      return InvalidArgument(what() + ": send and recv buffers overlap without being the same (" +
                             std::to_string(bytes) + " bytes each)");
    }
  }
  return Status::Ok();
}

Status Dispatch(const algos::Context& ctx, const CollectiveCall& c, algos::Algorithm algorithm,
                const algos::Tuning& tuning) {
  // A rooted call's ranks need not all hear from a rank that disagrees on it
  // (algos/agreement.h); the others compare fingerprints as they receive. A broadcast
  // by dissemination agrees in the rounds that carry its data.
  const bool agrees_itself = c.kind == Collective::kBroadcast && algorithm == algos::Algorithm::kDissemination;
  if (algos::IsRooted(c.kind) && !agrees_itself) CHORUS_RETURN_IF_ERROR(algos::AgreeOnCall(ctx));
  switch (c.kind) {
    case Collective::kAllReduce:
      if (algorithm == algos::Algorithm::kRecursiveDoubling) {
        return algos::AllReduceRecursiveDoubling(ctx, c.send, c.recv, c.count, c.dtype, c.op);
      }
      if (algorithm == algos::Algorithm::kRabenseifner) {
        return algos::AllReduceRabenseifner(ctx, c.send, c.recv, c.count, c.dtype, c.op);
      }
      if (algorithm == algos::Algorithm::kTree) {
        return algos::AllReduceTree(ctx, c.send, c.recv, c.count, c.dtype, c.op, tuning);
      }
      if (algorithm == algos::Algorithm::kHierarchical && tuning.topology != nullptr) {
        return algos::AllReduceHierarchical(ctx, *tuning.topology, c.send, c.recv, c.count, c.dtype, c.op, tuning);
      }
      return algos::AllReduceRing(ctx, c.send, c.recv, c.count, c.dtype, c.op, tuning);
    case Collective::kBroadcast:
      if (algorithm == algos::Algorithm::kChain) {
        return algos::BroadcastChain(ctx, c.send, c.recv, c.count, c.dtype, c.root, tuning);
      }
      if (algorithm == algos::Algorithm::kTree) {
        return algos::BroadcastTree(ctx, c.send, c.recv, c.count, c.dtype, c.root, tuning);
      }
      if (agrees_itself) return algos::BroadcastAgreed(ctx, c.recv, c.count, c.dtype, c.root, c.send);
      // The others broadcast in place: out of place, the root's input goes into its
      // output first.
      if (ctx.rank() == c.root && c.send != nullptr && c.send != c.recv) {
        CHORUS_RETURN_IF_ERROR(algos::InputReady(ctx, 0, c.count * DataTypeSize(c.dtype)));
        algos::CopyIfDistinct(c.recv, c.send, c.count * DataTypeSize(c.dtype));
      }
      if (algorithm == algos::Algorithm::kScatterAllGather) {
        return algos::BroadcastScatterAllGather(ctx, c.recv, c.count, c.dtype, c.root, tuning);
      }
      if (algorithm == algos::Algorithm::kHierarchical && tuning.topology != nullptr) {
        return algos::BroadcastHierarchical(ctx, *tuning.topology, c.recv, c.count, c.dtype, c.root, tuning);
      }
      return algos::BroadcastTree(ctx, c.recv, c.recv, c.count, c.dtype, c.root, tuning);
    case Collective::kReduce:
      if (algorithm == algos::Algorithm::kHierarchical && tuning.topology != nullptr) {
        return algos::ReduceHierarchical(ctx, *tuning.topology, c.send, c.recv, c.count, c.dtype, c.op, c.root, tuning);
      }
      return algos::ReduceTree(ctx, c.send, c.recv, c.count, c.dtype, c.op, c.root, tuning);
    case Collective::kAllGather:
      if (algorithm == algos::Algorithm::kRecursiveDoubling) {
        return algos::AllGatherRecursiveDoubling(ctx, c.send, c.recv, c.count, c.dtype);
      }
      if (algorithm == algos::Algorithm::kHierarchical && tuning.topology != nullptr) {
        return algos::AllGatherHierarchical(ctx, *tuning.topology, c.send, c.recv, c.count, c.dtype, tuning);
      }
      return algos::AllGatherRing(ctx, c.send, c.recv, c.count, c.dtype, tuning);
    case Collective::kReduceScatter:
      if (algorithm == algos::Algorithm::kHierarchical && tuning.topology != nullptr) {
        return algos::ReduceScatterHierarchical(ctx, *tuning.topology, c.send, c.recv, c.count, c.dtype, c.op, tuning);
      }
      return algos::ReduceScatterRing(ctx, c.send, c.recv, c.count, c.dtype, c.op, tuning);
    case Collective::kGather: return algos::Gather(ctx, c.send, c.recv, c.count, c.dtype, c.root);
    case Collective::kScatter: return algos::Scatter(ctx, c.send, c.recv, c.count, c.dtype, c.root);
    case Collective::kAllToAll: return algos::AllToAllPairwise(ctx, c.send, c.recv, c.count, c.dtype);
    case Collective::kBarrier: return algos::Barrier(ctx);
  }
  return InternalError("unknown collective");
}

}  // namespace chorus::internal
