#include "algos/context.h"

namespace chorus::algos {

Status CallMismatch(const Context& ctx, int peer, uint64_t remote_fingerprint,
                    std::string (*describe)(uint64_t fingerprint)) {
  return MismatchError("rank " + std::to_string(ctx.rank()) + " called " + describe(ctx.fingerprint) + " but rank " +
                       std::to_string(peer) + " called " + describe(remote_fingerprint) + " (collective #" +
                       std::to_string(ctx.seq) + " on this communicator)");
}

Status WaitRequest(const Context& ctx, transport::Request& req, int peer,
                   std::string (*describe)(uint64_t fingerprint)) {
  Status st = req.Wait(ctx.deadline);
  if (st.code() == StatusCode::kMismatch && req.remote_fingerprint() != 0 && describe != nullptr) {
    return CallMismatch(ctx, peer, req.remote_fingerprint(), describe);
  }
  return st;
}

}  // namespace chorus::algos
