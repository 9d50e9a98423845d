// Gather and scatter, linear at the root: the root posts every receive (gather) or
// send (scatter) at once and lets the transport move them concurrently; each other
// rank exchanges one message with the root. Block i (count elements) of the root's
// buffer belongs to rank i. One message per peer, so every message uses step 0.
#include <string>
#include <vector>

#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/pending_sends.h"

namespace chorus::algos {
namespace {

Status CheckRoot(const char* what, int root, int n) {
  if (root >= 0 && root < n) return Status::Ok();
  return InvalidArgument(std::string(what) + ": root " + std::to_string(root) + " is not a rank of a world of size " +
                         std::to_string(n));
}

}  // namespace

Status Gather(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, int root) {
  const int n = ctx.size();
  const int r = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckRoot("gather", root, n));
  const size_t bytes = count * DataTypeSize(dtype);
  if (r != root) {
    transport::RequestPtr out = ctx.transport.Send(root, ctx.tag(0), send, bytes, ctx.fingerprint);
    return Wait(ctx, *out, root);
  }
  // Root: one receive per rank into its block, all posted before any wait.
  std::vector<transport::RequestPtr> in(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (i != root) in[i] = PostRecv(ctx, i, 0, static_cast<char*>(recv) + i * bytes, bytes);
  }
  CopyIfDistinct(static_cast<char*>(recv) + root * bytes, send, bytes);
  for (int i = 0; i < n; ++i) {
    if (i != root) CHORUS_RETURN_IF_ERROR(Wait(ctx, *in[i], i));
  }
  return Status::Ok();
}

Status Scatter(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, int root) {
  const int n = ctx.size();
  const int r = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckRoot("scatter", root, n));
  const size_t bytes = count * DataTypeSize(dtype);
  if (r != root) {
    transport::RequestPtr in = PostRecv(ctx, root, 0, recv, bytes);
    return Wait(ctx, *in, root);
  }
  // Root: one send per rank from its block, all posted before any wait.
  PendingSends sends(ctx);
  for (int i = 0; i < n; ++i) {
    if (i != root) sends.Post(i, 0, static_cast<const char*>(send) + i * bytes, bytes);
  }
  CopyIfDistinct(recv, static_cast<const char*>(send) + root * bytes, bytes);
  return sends.WaitAll();
}

}  // namespace chorus::algos
