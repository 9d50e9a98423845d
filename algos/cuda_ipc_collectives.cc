#include "algos/cuda_ipc_collectives.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "algos/chunking.h"
#include "algos/pending_sends.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::algos {
namespace {

namespace ipc = transport::cuda_ipc;
namespace kcuda = kernels::cuda;

// Steps (message tags) of one call.
constexpr uint32_t kOfferStep = 0, kVerdictStep = 1, kMidStep = 2, kDoneStep = 3;

// Whether a rank can take part; the largest verdict of all ranks decides.
enum Verdict : uint8_t { kCan = 0, kNotThisCall = 1, kNever = 2 };

struct Verdicts {
  uint8_t verdict = kCan;
  char why[119] = {};
  void Decline(Verdict v, const std::string& reason) {
    if (verdict != kCan) return;
    verdict = v;
    std::strncpy(why, reason.c_str(), sizeof(why) - 1);
  }
};

// What a rank sends every peer first: its verdict, what it lets them map, its signals.
struct Offer {
  Verdicts v;
  int64_t pid = 0;  // CUDA IPC maps other processes' memory only
  uint8_t has_send = 0, has_recv = 0;
  uint8_t mps = 0;      // this rank's GPU contexts are shared through MPS
  uint8_t always = 0;   // this rank set CHORUS_CUDA_IPC=always
  uint8_t split = 0;    // this rank set CHORUS_CUDA_IPC_ONE_GPU=split
  uint8_t signals = 0;  // this rank stages stream-form calls with signal flags
  ipc::DeviceUuid device{};
  ipc::ExportedBuffer send{}, recv{};
  SyncOffer sync;
};

// Sends `bytes` of `mine` to every peer and receives each peer's into all + p * bytes
// (bytes 0: empty messages, "signalled").
Status ExchangeBytes(const Context& ctx, uint32_t step, const void* mine, size_t bytes, char* all) {
  const int n = ctx.size(), r = ctx.rank();
  std::vector<transport::RequestPtr> recvs(n), sends(n);
  for (int p = 0; p < n; ++p) {
    if (p != r) recvs[p] = PostRecv(ctx, p, step, bytes ? all + p * bytes : nullptr, bytes);
  }
  for (int p = 0; p < n; ++p) {
    if (p != r) sends[p] = ctx.transport.Send(p, ctx.tag(step), mine, bytes, ctx.fingerprint);
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    CHORUS_RETURN_IF_ERROR(Wait(ctx, *recvs[p], p));
    CHORUS_RETURN_IF_ERROR(Wait(ctx, *sends[p], p));
  }
  return Status::Ok();
}

// Every rank's `mine`, in rank order.
template <typename T>
Status ExchangeAll(const Context& ctx, uint32_t step, const T& mine, std::vector<T>& all) {
  all.assign(ctx.size(), T{});
  all[ctx.rank()] = mine;
  return ExchangeBytes(ctx, step, &mine, sizeof(T), reinterpret_cast<char*>(all.data()));
}

Status Announce(const Context& ctx, uint32_t step) { return ExchangeBytes(ctx, step, nullptr, 0, nullptr); }

// all_reduce's slice p, in units of 64 elements (at least 64 bytes): every slice of an
// aligned buffer starts 16-byte aligned, and the kernels go 16 bytes at a time.
Span SliceOf(size_t count, int n, int p) { return UnitBlock(count, n, p, 64); }

bool Reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

// Which of rank p's buffers rank r reads (the send, the recv).
std::pair<bool, bool> Reads(const DeviceCall& c, int r, int p) {
  switch (c.kind) {
    case Collective::kAllReduce: return {true, true};
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return {true, false};
    case Collective::kReduce:
    case Collective::kGather: return {r == c.root, false};
    case Collective::kBroadcast: return {false, r != c.root && p == c.root};
    case Collective::kScatter: return {p == c.root, false};
    case Collective::kBarrier: return {false, false};
  }
  return {false, false};
}

// dst = inputs[0] op ... op inputs[n-1] over `count` elements (AVG: / n in the same pass).
Status ReduceAll(const DeviceCall& c, void* dst, const std::vector<const void*>& inputs, size_t count, void* stream) {
  if (count == 0) return Status::Ok();
  return kcuda::ReduceNToAll(c.dtype, c.op, &dst, 1, inputs.data(), static_cast<int>(inputs.size()), count, stream);
}

// Phase 1: read the peers' inputs (send[p], or recv[p] for a broadcast's root) and
// write this rank's output.
Status PhaseOne(const Context& ctx, const DeviceCall& c, const std::vector<const char*>& send,
                const std::vector<const char*>& recv, void* stream) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t e = DataTypeSize(c.dtype), b = c.count * e;
  char* out = static_cast<char*>(c.recv);
  std::vector<const void*> in(n);
  switch (c.kind) {
    case Collective::kAllReduce: {  // our slice of everyone's vector, reduced into our output
      const Span mine = SliceOf(c.count, n, r);
      for (int p = 0; p < n; ++p) in[p] = send[p] + mine.offset * e;
      return ReduceAll(c, out + mine.offset * e, in, mine.count, stream);
    }
    case Collective::kReduceScatter:  // our block of everyone's vector
      for (int p = 0; p < n; ++p) in[p] = send[p] + r * b;
      return ReduceAll(c, out, in, c.count, stream);
    case Collective::kReduce:  // the root reduces everyone's vector
      if (r != c.root) return Status::Ok();
      for (int p = 0; p < n; ++p) in[p] = send[p];
      return ReduceAll(c, out, in, c.count, stream);
    case Collective::kGather:  // the root copies everyone's block, as all_gather does
      if (r != c.root) return Status::Ok();
      [[fallthrough]];
    case Collective::kAllGather:  // everyone's block into ours
      for (int p = 0; p < n; ++p) CHORUS_RETURN_IF_ERROR(ipc::CopyAsync(out + p * b, send[p], b, stream));
      return Status::Ok();
    case Collective::kBroadcast:  // the root's buffer into ours
      return r == c.root ? Status::Ok() : ipc::CopyAsync(out, recv[c.root], b, stream);
    case Collective::kScatter:  // our block of the root's buffer
      return ipc::CopyAsync(out, send[c.root] + r * b, b, stream);
    case Collective::kAllToAll:  // block r of every rank's input, into block p of ours
      for (int p = 0; p < n; ++p) CHORUS_RETURN_IF_ERROR(ipc::CopyAsync(out + p * b, send[p] + r * b, b, stream));
      return Status::Ok();
    case Collective::kBarrier: return Status::Ok();
  }
  return Status::Ok();
}

// all_reduce's phase 2: every peer's reduced slice, from its output into ours.
Status GatherSlices(const Context& ctx, const DeviceCall& c, const std::vector<const char*>& recv, void* stream) {
  const int n = ctx.size();
  const size_t e = DataTypeSize(c.dtype);
  for (int p = 0; p < n; ++p) {
    if (p == ctx.rank()) continue;
    const Span theirs = SliceOf(c.count, n, p);
    CHORUS_RETURN_IF_ERROR(ipc::CopyAsync(static_cast<char*>(c.recv) + theirs.offset * e, recv[p] + theirs.offset * e,
                                          theirs.count * e, stream));
  }
  return Status::Ok();
}

// This rank's offer: its signals (made on first use), device and exported buffers, or
// why it cannot take part.
Offer MakeOffer(const Context& ctx, const DeviceCall& c, CudaIpcState& state) {
  Offer o;
  o.pid = getpid();
  o.always = state.always ? 1 : 0;
  o.split = state.split_on_one_gpu ? 1 : 0;
  o.signals = state.signal_flags ? 1 : 0;
  if (Reduces(c.kind) && ctx.size() > kcuda::kMaxInputs) {
    o.v.Decline(kNotThisCall, "more than " + std::to_string(kcuda::kMaxInputs) + " ranks to reduce in one pass");
  }
  if (c.kind == Collective::kAllToAll && c.send == c.recv && c.send_bytes > 0) {
    o.v.Decline(kNotThisCall, "in-place all_to_all (peers would read what this rank overwrites)");
  }
  Result<SyncOffer> sync = MakeSyncOffer(state.sync);
  if (!sync.ok()) {
    o.v.Decline(kNever, sync.status().message());
    return o;
  }
  o.sync = sync.value();
  Result<ipc::DeviceUuid> dev = ipc::CurrentDevice();
  if (!dev.ok()) {
    o.v.Decline(kNever, dev.status().message());
    return o;
  }
  o.device = dev.value();
  o.mps = state.mps ? 1 : 0;
  for (auto [ptr, bytes, out, has] :
       {std::tuple<const void*, size_t, ipc::ExportedBuffer*, uint8_t*>{c.send, c.send_bytes, &o.send, &o.has_send},
        {c.recv, c.recv_bytes, &o.recv, &o.has_recv}}) {
    if (bytes == 0) continue;
    Result<ipc::ExportedBuffer> ex = ipc::Export(ptr);
    if (!ex.ok()) {
      o.v.Decline(kNotThisCall, ex.status().message());
      return o;
    }
    *out = ex.value();
    *has = 1;
  }
  return o;
}

// Whether every rank's buffers are on one GPU and no rank asked for the split all_reduce.
bool OneGpu(const std::vector<Offer>& offers) {
  for (const Offer& o : offers) {
    if (o.split || std::memcmp(o.device.bytes, offers[0].device.bytes, sizeof(o.device.bytes)) != 0) return false;
  }
  return true;
}

// all_reduce of ranks on one GPU: rank 0 alone reads every input and writes every
// output in one pass (each byte read or written once: 2 n S bytes for n ranks of S
// bytes, against (2 n + 1) S split). Splitting the work buys no parallelism on one GPU,
// and without MPS the ranks' processes take turns on it: each cross-process wait costs
// a turn, and here there are two (rank 0 waits for READY, the others for its DONE).
//   rank 0: the stream waits for every peer's READY; reduce into every output; DONE
//   others: the stream waits for rank 0's DONE   // nobody reads or writes our buffers any more
Status RunLedByRankZero(const Context& ctx, const DeviceCall& c, CallSync& sync, const std::vector<const char*>& send,
                        const std::vector<const char*>& recv, void* stream) {
  const int n = ctx.size();
  if (ctx.rank() == 0) {
    CHORUS_RETURN_IF_ERROR(sync.WaitForPeers(kReadyPhase, stream));
    if (c.count > 0) {
      std::vector<const void*> in(send.begin(), send.end());
      std::vector<void*> out(n);
      for (int p = 0; p < n; ++p) out[p] = const_cast<char*>(recv[p]);  // peers' outputs, mapped writable
      CHORUS_RETURN_IF_ERROR(kcuda::ReduceNToAll(c.dtype, c.op, out.data(), n, in.data(), n, c.count, stream));
    }
    CHORUS_RETURN_IF_ERROR(sync.Signal(kDonePhase, stream));
  }
  CHORUS_RETURN_IF_ERROR(Announce(ctx, kDoneStep));
  return ctx.rank() == 0 ? Status::Ok() : sync.WaitFor(0, kDonePhase, stream);
}

// Steps 3-5 of the schedule, once every rank agreed.
Status RunPhases(const Context& ctx, const DeviceCall& c, CallSync& sync, const std::vector<const char*>& send,
                 const std::vector<const char*>& recv, void* stream) {
  // 3. Our stream waits for every peer's inputs, then phase 1.
  CHORUS_RETURN_IF_ERROR(sync.WaitForPeers(kReadyPhase, stream));
  CHORUS_RETURN_IF_ERROR(PhaseOne(ctx, c, send, recv, stream));
  if (c.kind == Collective::kAllReduce) {
    // 4. all_reduce: once every peer's slice is reduced, copy it.
    CHORUS_RETURN_IF_ERROR(sync.Signal(kMidPhase, stream));
    CHORUS_RETURN_IF_ERROR(Announce(ctx, kMidStep));
    CHORUS_RETURN_IF_ERROR(sync.WaitForPeers(kMidPhase, stream));
    CHORUS_RETURN_IF_ERROR(GatherSlices(ctx, c, recv, stream));
  }
  // 5. Nobody reads our buffers after every peer's DONE: our later work may change them.
  CHORUS_RETURN_IF_ERROR(sync.Signal(kDonePhase, stream));
  CHORUS_RETURN_IF_ERROR(Announce(ctx, kDoneStep));
  return sync.WaitForPeers(kDonePhase, stream);
}

// Ranks whose GPU another rank uses too, where not all of them run under MPS: their
// work takes turns on the GPU (the same text on every rank, from the same offers).
// Nothing where some rank set CHORUS_CUDA_IPC=always.
std::string TimeSliced(const std::vector<Offer>& offers) {
  for (const Offer& o : offers) {
    if (o.always) return "";
  }
  std::vector<bool> told(offers.size());
  std::string out;
  for (size_t p = 0; p < offers.size(); ++p) {
    if (told[p]) continue;
    std::string ranks = std::to_string(p);
    bool shared = false, all_mps = offers[p].mps != 0;
    for (size_t q = p + 1; q < offers.size(); ++q) {
      if (std::memcmp(offers[q].device.bytes, offers[p].device.bytes, sizeof(offers[p].device.bytes)) != 0) continue;
      told[q] = shared = true;
      all_mps = all_mps && offers[q].mps != 0;
      ranks += ", " + std::to_string(q);
    }
    if (!shared || all_mps) continue;
    out += (out.empty() ? "" : "; ") + std::string("ranks ") + ranks + " share " + ipc::UuidText(offers[p].device) +
           " without MPS";
  }
  return out;
}

}  // namespace

Result<IpcOutcome> RunCudaIpc(const Context& ctx, const DeviceCall& c, CudaIpcState& state, void* stream) {
  const int n = ctx.size(), r = ctx.rank();
  // 1. Our offer.
  Offer mine = MakeOffer(ctx, c, state);
  std::vector<Offer> offers;
  CHORUS_RETURN_IF_ERROR(ExchangeAll(ctx, kOfferStep, mine, offers));
  std::vector<SyncOffer> syncs(n);
  for (int p = 0; p < n; ++p) syncs[p] = offers[p].sync;
  CallSync sync(state.sync, syncs, r);

  // 2. Map what we read of each peer and reach its signals; READY marks "our inputs
  //    are written" on our stream; every rank says whether it can go on.
  Verdicts v;
  std::vector<const char*> send(n), recv(n);
  send[r] = static_cast<const char*>(c.send);
  recv[r] = static_cast<const char*>(c.recv);
  for (int p = 0; p < n && v.verdict == kCan; ++p) {
    if (offers[p].v.verdict != kCan) v.Decline(kNotThisCall, "");  // its own reason travels in its offer
    if (p == r || v.verdict != kCan) continue;
    if (offers[p].pid == mine.pid) {
      v.Decline(kNever,
                "rank " + std::to_string(p) + " is a thread of this process (CUDA IPC maps other processes' memory)");
      break;
    }
    // A GPU hidden from this process (one per rank in CUDA_VISIBLE_DEVICES) may still be
    // mapped: its first mapping decides.
    const bool visible = ipc::Visible(offers[p].device);
    if (Status reach = visible ? ipc::CanReach(offers[p].device) : Status::Ok(); !reach.ok()) {
      v.Decline(kNever, "rank " + std::to_string(p) + "'s GPU: " + reach.message());
      break;
    }
    if (Status reached = sync.Reach(p, state.mappings, ctx.deadline); !reached.ok()) {
      // Flags that cannot be mapped: this call is staged, the next ones use events.
      v.Decline(sync.flags() ? kNotThisCall : kNever,
                "rank " + std::to_string(p) + "'s " + (sync.flags() ? "flags" : "events") + ": " + reached.message());
      break;
    }
    const auto [reads_send, reads_recv] = Reads(c, r, p);
    for (auto [wanted, has, ex, out] : {std::tuple<bool, uint8_t, const ipc::ExportedBuffer*, const char**>{
                                            reads_send, offers[p].has_send, &offers[p].send, &send[p]},
                                        {reads_recv, offers[p].has_recv, &offers[p].recv, &recv[p]}}) {
      if (!wanted) continue;
      if (!has) {  // ranks that disagree on the call's buffers (the fingerprints agreed)
        if (c.count > 0) v.Decline(kNotThisCall, "rank " + std::to_string(p) + " offered no buffer to read");
        continue;
      }
      Result<void*> mapped = state.mappings.Map(p, *ex, ctx.deadline);
      if (!mapped.ok()) {
        v.Decline(visible ? kNotThisCall : kNever, "mapping rank " + std::to_string(p) + "'s buffer" +
                                                       (visible ? "" : " (its GPU is not visible here)") + ": " +
                                                       mapped.status().message());
        break;
      }
      *out = static_cast<const char*>(mapped.value());
    }
  }
  if (v.verdict == kCan) CHORUS_RETURN_IF_ERROR(sync.Signal(kReadyPhase, stream));
  std::vector<Verdicts> verdicts;
  CHORUS_RETURN_IF_ERROR(ExchangeAll(ctx, kVerdictStep, v, verdicts));
  IpcOutcome outcome;
  bool declined = false;
  for (int p = 0; p < n; ++p) {
    for (const Verdicts& w : {offers[p].v, verdicts[p]}) {
      if (w.verdict == kCan) continue;
      declined = true;
      outcome.for_good = outcome.for_good || w.verdict == kNever;
      if (w.why[0] == '\0') continue;
      outcome.why += (outcome.why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " + w.why;
    }
  }
  if (declined) {  // nobody enqueued anything but READY
    state.mappings.EndCall(nullptr);
    CHORUS_RETURN_IF_ERROR(sync.End(nullptr, stream));
    return outcome;
  }
  Status st = c.kind == Collective::kAllReduce && OneGpu(offers) ? RunLedByRankZero(ctx, c, sync, send, recv, stream)
                                                                 : RunPhases(ctx, c, sync, send, recv, stream);
  // Whatever happened, what was enqueued reads the peers' buffers until this event.
  Result<kcuda::StreamEvent> end = kcuda::StreamEvent::Record(stream);
  if (end.ok()) outcome.end = std::make_shared<kcuda::StreamEvent>(std::move(end.value()));
  state.mappings.EndCall(outcome.end);
  CHORUS_RETURN_IF_ERROR(st);
  CHORUS_RETURN_IF_ERROR(end.status());
  CHORUS_RETURN_IF_ERROR(sync.End(outcome.end, stream));
  outcome.ran = true;
  outcome.flags = sync.flags();
  outcome.no_flags = sync.NoFlagsOnce();
  outcome.time_sliced = TimeSliced(offers);
  outcome.every_rank_signals = std::all_of(offers.begin(), offers.end(), [](const Offer& o) { return o.signals != 0; });
  return outcome;
}

}  // namespace chorus::algos
