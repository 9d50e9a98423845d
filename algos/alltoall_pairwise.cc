// All-to-all by pairwise exchange: at step s = 1 .. n-1 rank r sends block r+s of
// its send buffer to rank r+s and receives block r-s of recv from rank r-s, with tag
// step s-1. Every step's messages are posted up front (in step order, so each peer
// link carries them in schedule order) and waited for in the same order; each rank
// talks to every other exactly once per direction.
// Blocks of kCreditAtBytes and more go only once their receive is posted (credits.h): a
// rank that comes late would otherwise find its peers' blocks waiting in its
// transport. Each rank then first posts, per peer, the receive of the peer's credit and
// of its block (both on the tag of that peer's messages to us: credit first), sends
// every peer a credit, and sends each block as its credit arrives, in step order.
//
// In place (send == recv) the block for peer p and the block from p are the same bytes:
// the block from p lands in scratch and is copied into place once ours to p has gone
// (our own block stays where it is). That copies (n-1)/n of the buffer where copying
// it all aside first copied (n+1)/n (docs/design/flow_control.md). A send buffer that
// overlaps recv otherwise is copied aside whole.
//
// On streamed bounce buffers (ctx.staging) a block is waited for before it is sent
// (a send buffer copied aside: the whole input, before the copy), and each block of the
// result is reported final once it is in place.
#include <memory>
#include <utility>
#include <vector>

#include "algos/buffer.h"
#include "algos/collectives.h"
#include "algos/credits.h"
#include "algos/input_order.h"
#include "algos/pending_sends.h"

namespace chorus::algos {

Status AllToAllPairwise(const Context& ctx, const void* send, void* recv, size_t count, DataType dtype) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t bytes = count * DataTypeSize(dtype);
  const size_t total = bytes * static_cast<size_t>(n);
  // Streamed: the input comes to the host in the order this rank sends it, ours last.
  InputOrder(ctx, [&] { return InputReadOrder(Collective::kAllToAll, Algorithm::kPairwise, r, n, count, dtype); });
  BufferCache::Buffer copy, landing;
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  const bool in_place = src == dst && total > 0 && n > 1;
  if (in_place) {
    landing = ctx.Scratch(total - bytes);  // the peers' blocks, in step order
  } else if (total > 0 && src < dst + total && dst < src + total && n > 1) {
    // Partly overlapping: blocks would be overwritten before they are sent.
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, 0, total));
    copy = ctx.Scratch(total);
    std::memcpy(copy.data(), src, total);
    src = copy.data();
  }
  // Where the block from rank `from` (step s) lands first.
  auto land = [&](int s, int from) { return in_place ? landing.data() + (s - 1) * bytes : dst + from * bytes; };

  const bool credited = bytes >= kCreditAtBytes;
  return AbortOnError(ctx, [&]() -> Status {
    std::vector<transport::RequestPtr> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    std::vector<std::unique_ptr<CreditsFrom>> credit_from(static_cast<size_t>(n));
    PendingSends sends(ctx);
    // Step s: block `to` goes to rank `to`; block `from` comes from rank `from`.
    for (int s = 1; s < n; ++s) {
      const int from = Mod(r - s, n);
      if (credited) {
        credit_from[from] = std::make_unique<CreditsFrom>(ctx, from, static_cast<uint32_t>(s - 1), 0);
        credit_from[from]->PostNext();
      }
      in[from] = PostRecv(ctx, from, static_cast<uint32_t>(s - 1), land(s, from), bytes);
    }
    for (int s = 1; s < n; ++s) {
      const int to = (r + s) % n;
      if (credited) {
        SendCredit(ctx, sends, to, static_cast<uint32_t>(s - 1));  // on the tag of our messages to `to`
      } else {
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, to * bytes, bytes));
        out[to] = sends.Post(to, static_cast<uint32_t>(s - 1), src + to * bytes, bytes);
      }
    }
    if (credited) {
      for (int s = 1; s < n; ++s) {
        const int to = (r + s) % n;
        CHORUS_RETURN_IF_ERROR(credit_from[to]->Await(0));
        CHORUS_RETURN_IF_ERROR(InputReady(ctx, to * bytes, bytes));
        out[to] = sends.Post(to, static_cast<uint32_t>(s - 1), src + to * bytes, bytes);
      }
    }
    CHORUS_RETURN_IF_ERROR(InputReady(ctx, r * bytes, bytes));
    if (!in_place) CopyMovingBytes(ctx, dst + r * bytes, src + r * bytes, bytes);
    OutputFinal(ctx, r * bytes, bytes);
    for (int s = 1; s < n; ++s) {
      const int from = Mod(r - s, n);
      CHORUS_RETURN_IF_ERROR(Wait(ctx, *in[from], from));
      if (in_place) {
        // Every send is posted and every peer has posted its receives: ours to `from`
        // completes; then its bytes may take the block that came from `from`.
        CHORUS_RETURN_IF_ERROR(Wait(ctx, *out[from], from));
        CopyMovingBytes(ctx, dst + from * bytes, land(s, from), bytes);
      }
      OutputFinal(ctx, from * bytes, bytes);
      CHORUS_RETURN_IF_ERROR(sends.Reap());
    }
    return sends.WaitAll();
  });
}

}  // namespace chorus::algos
