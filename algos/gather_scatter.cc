// Gather and scatter, linear at the root: the root posts every receive (gather) or
// send (scatter) at once and lets the transport move them concurrently; each other
// rank exchanges one message with the root. Block i (count elements) of the root's
// buffer belongs to rank i. One message per peer, so every message uses step 0.
// Blocks of kCreditAtBytes and more go only once their receive is posted (credits.h):
// a rank that comes early to a gather (or a root early to a scatter) would otherwise
// park its block in the transport of the one that comes late.
//
// On streamed bounce buffers (ctx.staging) a block is waited for before it is sent or
// copied, and each block of the result is reported final once it is in place.
#include <memory>
#include <string>
#include <vector>

#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/credits.h"
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
  const bool credited = bytes >= kCreditAtBytes;
  if (r != root) {
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, bytes));  // while the root may still be on its way
    if (credited) {
      CreditsFrom credit(ctx, root, 0, 0);
      CHORUS_RETURN_IF_ERROR(credit.Await(0));
    }
    transport::RequestPtr out = ctx.transport.Send(root, ctx.tag(0), send, bytes, ctx.fingerprint);
    return Wait(ctx, *out, root);
  }
  return AbortOnError(ctx, [&]() -> Status {
    // Root: one receive per rank into its block, all posted (and credited) before any wait.
    PendingSends credits(ctx);
    std::vector<transport::RequestPtr> in(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      in[i] = PostRecv(ctx, i, 0, static_cast<char*>(recv) + i * bytes, bytes);
      if (credited) SendCredit(ctx, credits, i, 0);
    }
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, bytes));
    CopyMovingBytes(ctx, static_cast<char*>(recv) + root * bytes, send, bytes);
    OutputFinal(ctx, root * bytes, bytes);
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in[i], i));
      OutputFinal(ctx, i * bytes, bytes);
    }
    return credits.WaitAll();
  });
}

Status Scatter(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype, int root) {
  const int n = ctx.size();
  const int r = ctx.rank();
  CHORUS_RETURN_IF_ERROR(CheckRoot("scatter", root, n));
  const size_t bytes = count * DataTypeSize(dtype);
  const bool credited = bytes >= kCreditAtBytes;
  if (r != root) {
    return AbortOnError(ctx, [&]() -> Status {
      PendingSends credits(ctx);
      transport::RequestPtr in = PostRecv(ctx, root, 0, recv, bytes);
      if (credited) SendCredit(ctx, credits, root, 0);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in, root));
      OutputFinal(ctx, 0, bytes);
      return credits.WaitAll();
    });
  }
  // Root: one send per rank from its block, each as soon as it may go.
  return AbortOnError(ctx, [&]() -> Status {
    PendingSends sends(ctx);
    std::vector<std::unique_ptr<CreditsFrom>> waiting(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      if (credited) {
        waiting[i] = std::make_unique<CreditsFrom>(ctx, i, 0, 0);
      } else {
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, i * bytes, bytes));
        sends.Post(i, 0, static_cast<const char*>(send) + i * bytes, bytes);
      }
    }
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, root * bytes, bytes));
    CopyMovingBytes(ctx, recv, static_cast<const char*>(send) + root * bytes, bytes);
    OutputFinal(ctx, 0, bytes);
    for (size_t left = credited ? static_cast<size_t>(n - 1) : 0; left > 0;) {
      int first = -1;  // the first rank still waiting, to block on when none is ready
      for (int i = 0; i < n; ++i) {
        if (!waiting[i]) continue;
        Result<bool> ready = waiting[i]->Test(0);
        if (!ready.ok()) return ready.status();
        if (!*ready) {
          if (first < 0) first = i;
          continue;
        }
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, i * bytes, bytes));
        sends.Post(i, 0, static_cast<const char*>(send) + i * bytes, bytes);
        waiting[i].reset();
        --left;
      }
      if (first >= 0 && left > 0) CHORUS_RETURN_IF_ERROR(waiting[first]->Await(0));
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
