#include "chorus/comm_impl.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "algos/input_order.h"
#include "chorus/transport_setup.h"
#include "common/env.h"
#include "common/job_secret.h"
#include "common/log.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/signal_flags.h"
#include "kernels/cuda/stream_ops.h"

namespace chorus::internal {
namespace {

// A Work over one transport request (point-to-point).
class RequestWork : public WorkState {
 public:
  RequestWork(transport::RequestPtr req, transport::Transport* transport, std::string what,
              std::chrono::milliseconds timeout)
      : req_(std::move(req)), transport_(transport), what_(std::move(what)), timeout_(timeout) {}

  bool Test() override { return req_->Test(); }

  Status Wait(std::chrono::milliseconds timeout) override {
    Status st = req_->Wait(Deadline::After(timeout));
    if (st.code() == StatusCode::kTimeout && !req_->Test()) {
      // The buffer is still posted: abort so the engine lets go of it before we return.
      Status reason = TimeoutError(what_ + " did not complete within " + std::to_string(timeout.count()) + " ms");
      transport_->Abort(reason);
      return reason;
    }
    if (!st.ok()) return st.WithContext(what_);
    return st;
  }

  std::chrono::milliseconds default_timeout() const override { return timeout_; }

 private:
  transport::RequestPtr req_;
  transport::Transport* transport_;
  std::string what_;
  std::chrono::milliseconds timeout_;
};

// How long a store's host that failed set-up keeps the store for the other ranks to
// read why (milliseconds).
constexpr int64_t kStoreLingerMs = 5000;

uint64_t RandomId() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

}  // namespace

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::Create(const Options& options) {
  std::unique_ptr<CommunicatorImpl> impl(new CommunicatorImpl());
  Status st = impl->Init(options);
  if (!st.ok()) return st;
  return impl;
}

Status CommunicatorImpl::Init(const Options& options) {
  if (options.config) {
    config_ = *options.config;
  } else {
    CHORUS_RETURN_IF_ERROR(Config::ProcessConfigStatus());
    config_ = Config::Process();
  }
  PhaseClock phases;
  if (options.store) {
    // The application's store (torch's): rank and size are the caller's; the interface
    // is the one toward MASTER_ADDR where it is set (torchrun, env://).
    if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
      return InvalidArgument("a communicator on a given store needs its rank and world size: rank " +
                             std::to_string(options.rank) + " is not in [0, " + std::to_string(options.world_size) +
                             ")");
    }
    spec_.method = "store";
    spec_.source = "arguments";
    spec_.rank = options.rank;
    spec_.world_size = options.world_size;
    spec_.master_addr = ProcessEnv()("MASTER_ADDR").value_or("");
    rdv_ = std::make_shared<rendezvous::Rendezvous>();
    rdv_->store = options.store;
  } else {
    // 1. Who am I, and where is the store (env://, tcp://, file://, launcher variables).
    Result<rendezvous::InitSpec> spec =
        rendezvous::ResolveInit(options.init_method, options.rank, options.world_size, ProcessEnv());
    if (!spec.ok()) return spec.status();
    spec_ = spec.value();
    spec_.secret = config_.secret;
    // 2. Meet the other ranks at the store.
    Result<rendezvous::Rendezvous> rdv = rendezvous::Join(spec_, Deadline::AfterMs(config_.connect_timeout_ms));
    if (!rdv.ok()) return rdv.status().WithContext("rank " + std::to_string(spec_.rank) + " rendezvous");
    rdv_ = std::make_shared<rendezvous::Rendezvous>(std::move(rdv.value()));
  }
  phases.Mark("join");
  rank_ = spec_.rank;
  size_ = spec_.world_size;
  SetLogRank(rank_);

  // A duplicate rank, another world size or a second job on this store is named now;
  // from here on, waits at the store end early once any rank of the job gives up.
  Result<rendezvous::Membership> member =
      rendezvous::Membership::Claim(*rdv_->store, rank_, size_, Deadline::AfterMs(config_.connect_timeout_ms));
  if (!member.ok()) {
    LingerWhileOthersLeave();
    return member.status();
  }
  membership_ = member.value();
  auto watched = std::make_shared<rendezvous::WatchedStore>(rdv_->store, membership_->abort_key());
  rdv_->store = watched;
  phases.Mark("claim");

  // A store may outlive one job (a standalone store, several communicators): every
  // communicator gets its own key space, numbered by arrival.
  Result<int64_t> arrivals = rdv_->store->Add("chorus/arrivals", 1);
  Status st = arrivals.ok() ? Status::Ok() : arrivals.status();
  if (st.ok()) st = Connect("chorus/comm" + std::to_string((arrivals.value() - 1) / size_) + "/", phases);
  // Every rank is connected to the store now: its port is free for the next one.
  if (st.ok() && rdv_->server) rdv_->server->StopAccepting();
  // The ranks still waiting for this one hear why at once, not at their deadline.
  if (!st.ok()) {
    // A neighbour on the bootstrap ring that went away (closed, refused) says less than
    // the reason a rank posted, where one did.
    if (st.code() == StatusCode::kPeerFailed || st.code() == StatusCode::kIoError) {
      Status posted = watched->Aborted();
      if (!posted.ok()) st = posted;
    }
    rendezvous::PostAbort(*rdv_->store, membership_->abort_key(), st);
    membership_->Release(*rdv_->store);
    membership_.reset();
    LingerWhileOthersLeave();
  }
  return st;
}

void CommunicatorImpl::LingerWhileOthersLeave() {
  if (!rdv_->server) return;
  rendezvous::Membership::AwaitOthersLeft(
      *rdv_->store, Deadline::AfterMs(std::min<int64_t>(config_.connect_timeout_ms, kStoreLingerMs)));
}

Status CommunicatorImpl::Connect(const std::string& prefix, PhaseClock& phases) {
  prefix_ = prefix;
  const Deadline deadline = Deadline::AfterMs(config_.connect_timeout_ms);
  algos::SelectorConfig sc;
  sc.forced = config_.algo;
  sc.model.chunk_bytes = static_cast<size_t>(config_.chunk_bytes);
  tuning_.chunk_bytes = static_cast<size_t>(config_.chunk_bytes);

  // The communicator's id, which every connection's handshake checks.
  uint64_t comm_id = 0;
  if (rank_ == 0) {
    comm_id = RandomId();
    CHORUS_RETURN_IF_ERROR(rdv_->store->Set(prefix_ + "id", std::to_string(comm_id)));
  } else {
    Result<std::string> id = rdv_->store->Get(prefix_ + "id", std::chrono::milliseconds(deadline.RemainingMs()));
    if (!id.ok()) return id.status().WithContext("rank " + std::to_string(rank_) + " waiting for rank 0");
    Result<uint64_t> parsed = ParseUnsigned("communicator id in the store (key " + prefix_ + "id)", id.value());
    if (!parsed.ok()) return parsed.status().WithContext("rank " + std::to_string(rank_));
    comm_id = parsed.value();
  }
  phases.Mark("id");

  // The application's store (torch's) admits whoever reaches it; the data connections
  // need not: without a job secret, rank 0 makes one for this communicator and hands it
  // to the others through that store.
  if (spec_.method == "store" && config_.secret.empty()) {
    if (rank_ == 0) {
      Result<std::string> made = NewSecretText();
      if (!made.ok()) return made.status().WithContext("rank 0 making the communicator's secret");
      CHORUS_RETURN_IF_ERROR(rdv_->store->Set(prefix_ + "secret", made.value()));
      config_.secret = JobSecret(made.value());
    } else {
      Result<std::string> got = rdv_->store->Get(prefix_ + "secret", std::chrono::milliseconds(deadline.RemainingMs()));
      if (!got.ok()) return got.status().WithContext("rank " + std::to_string(rank_) + " waiting for rank 0");
      if (got.value().empty()) {
        return ProtocolError("the communicator's secret in the store (key " + prefix_ + "secret) is empty");
      }
      config_.secret = JobSecret(got.value());
    }
  }
  if (spec_.method == "store") phases.Mark("secret");

  // Open, all-gather, choose (RDMA or TCP) and connect the transport.
  Result<TransportSetup> setup =
      SetUpTransport(config_, *rdv_->store, prefix_, rank_, size_, comm_id, spec_.master_addr, deadline, phases);
  if (!setup.ok()) return setup.status();
  transport_ = std::move(setup.value().transport);
  scratch_ = std::make_unique<BufferCache>(static_cast<size_t>(config_.scratch_cache_bytes));
  peers_ = std::move(setup.value().peers);
  transport_choice_ = setup.value().choice;
  // Ranks and cores per host: who is local, and whether some host is crowded.
  const std::string& my_host = peers_[rank_].host_id;
  const std::map<std::string, rendezvous::HostShare> hosts = rendezvous::HostShares(peers_);
  local_rank_ = 0;
  for (int r = 0; r < rank_; ++r) local_rank_ += peers_[r].host_id == my_host;
  local_size_ = hosts.at(my_host).ranks;

  // Every rank tunes alike: crowded where some machine runs more ranks than it has
  // cores (the ranks of all its hosts: namespaces and containers share them).
  for (const auto& [id, h] : hosts) {
    if (h.cores > 0) sc.model.crowding = std::max(sc.model.crowding, static_cast<double>(h.machine_ranks) / h.cores);
    if (h.crowded()) {
      tuning_.crowded_cores = true;
      if (rank_ == 0)
        CHORUS_INFO("host " << id << " runs " << h.ranks << " ranks, its machine " << h.machine_ranks << ", on "
                            << h.cores << " cores: large tree chunks wait for their credit");
    }
  }

  // The selector weighs the hosts x ranks and the links between them.
  std::vector<std::string> host_ids;
  for (const rendezvous::PeerInfo& p : peers_) host_ids.push_back(p.host_id);
  sc.model.topology = algos::Topology::FromHostIds(host_ids);
  sc.model.intra = setup.value().intra;
  sc.model.inter = setup.value().inter;
  Result<algos::Selector> selector = algos::Selector::Create(sc);
  if (!selector.ok()) return selector.status();
  selector_ = std::make_unique<algos::Selector>(selector.value());
  tuning_.topology = &selector_->topology();
  tuning_.model = &selector_->model();

  // Every rank takes the same way for device buffers: none uses CUDA IPC where one turned it off.
  std::vector<int> ipc_off;
  for (int r = 0; r < size_; ++r) {
    if (peers_[r].cuda_ipc_off) ipc_off.push_back(r);
  }
  ipc_turned_off_ = rendezvous::FormatRankList(ipc_off);

  executor_ = std::make_unique<Executor>(std::chrono::microseconds(config_.spin_us));
  device_ = std::make_unique<DeviceCalls>(config_.staging_sync == StagingSync::kSignals);
  connected_ = true;
  phases.Mark("rest");
  CHORUS_INFO("rank " << rank_ << ": set-up phases: " << phases.Summary());
  CHORUS_INFO("communicator ready: " << Describe());
  return Status::Ok();
}

CommunicatorImpl::~CommunicatorImpl() {
  Status st = Shutdown();
  if (!st.ok()) CHORUS_WARN(st.ToString());
  // The staging streams, events and semaphore go on the device they were made on.
  if (device_ && device_->device() >= 0) {
    Result<kernels::cuda::DeviceGuard> on_device = kernels::cuda::DeviceGuard::Set(device_->device());
    device_.reset();
  }
}

std::string CommunicatorImpl::Describe() const {
  std::string host = rank_ < static_cast<int>(peers_.size()) ? peers_[rank_].hostname : "?";
  return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " + host + " (local rank " +
         std::to_string(local_rank_) + " of " + std::to_string(local_size_) + "), " +
         (transport_ ? transport_->Describe() : std::string("no transport")) + ", init " + spec_.method + " (" +
         spec_.source + ")";
}

Result<std::string> CommunicatorImpl::Explain(const std::string& collective, size_t count, DataType dtype) const {
  using algos::Collective;
  std::optional<Collective> kind;
  std::string names;
  for (Collective k : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                       Collective::kReduceScatter, Collective::kGather, Collective::kScatter, Collective::kAllToAll,
                       Collective::kBarrier}) {
    names += (names.empty() ? "" : ", ") + std::string(algos::CollectiveName(k));
    if (collective == algos::CollectiveName(k)) kind = k;
  }
  if (!kind) return InvalidArgument("Explain: '" + collective + "' is not a collective (" + names + ")");
  if (static_cast<int>(dtype) >= kNumDataTypes) {
    return InvalidArgument("Explain: dtype " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
  const CollectiveCall call{*kind, nullptr, nullptr, count, dtype, ReduceOp::kSum, 0};
  if (Status st = CheckSize(call, size_); !st.ok()) return st.WithContext("Explain");
  // As Run does: a large element-wise call runs as consecutive windows (StagingWindows),
  // each chosen for; counted here, not made.
  const size_t per = WindowElems(call, static_cast<size_t>(config_.staging_window_bytes));
  const bool windowed = per < count;
  CollectiveCall first = call;
  first.count = per;
  const algos::Choice choice = selector_->Choose(*kind, first.bytes(size_), size_, /*explain=*/true);
  std::string out = std::string(algos::CollectiveName(*kind)) + " of " + std::to_string(count) + " " +
                    DataTypeName(dtype) + " (" + std::to_string(call.bytes(size_)) + " B) on " + std::to_string(size_) +
                    " ranks: ";
  if (windowed) {
    out += std::to_string((count + per - 1) / per) + " windows of up to " + std::to_string(first.bytes(size_)) +
           " B (CHORUS_STAGING_WINDOW), each ";
  }
  return out + algos::AlgorithmName(choice.algorithm) + " (" + choice.reason + "), over " +
         (transport_ ? transport_->Describe() : std::string("no transport"));
}

std::string CommunicatorImpl::PeerName(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return "rank " + std::to_string(peer);
  return "rank " + std::to_string(peer) + " (host " + peers_[peer].hostname + ", " + peers_[peer].tcp_address + ")";
}

Status CommunicatorImpl::CheckUsable() const {
  if (shut_down_) return AbortedError("rank " + std::to_string(rank_) + ": the communicator was shut down");
  Status health = transport_->health();
  // A member was lost while nothing was pending: this call is the first to fail on it.
  // Abort (idempotent), so the other ranks hear why (an ABORT naming the lost rank)
  // instead of merely seeing this rank go away next.
  if (!health.ok()) transport_->Abort(health);
  return health;
}

Result<std::string> CommunicatorImpl::CheckP2P(bool is_send, const void* buf, size_t bytes, int peer, uint32_t tag) {
  const char* verb = is_send ? "send" : "recv";
  if (peer < 0 || peer >= size_) {
    return InvalidArgument(std::string(verb) + " on rank " + std::to_string(rank_) + ": peer " + std::to_string(peer) +
                           " is not a rank of this communicator (size " + std::to_string(size_) + ")");
  }
  std::string what = std::string(verb) + " of " + std::to_string(bytes) + " bytes " + (is_send ? "to " : "from ") +
                     PeerName(peer) + " with tag " + std::to_string(tag) + " on rank " + std::to_string(rank_);
  if (buf == nullptr && bytes > 0) return InvalidArgument(what + ": buffer is null");
  Status usable = CheckUsable();
  if (!usable.ok()) return usable.WithContext(what);
  return what;
}

Work CommunicatorImpl::PostP2PHost(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag, std::string what) {
  transport::RequestPtr req =
      is_send ? transport_->Send(peer, tag, buf, bytes) : transport_->Recv(peer, tag, buf, bytes);
  return Work(std::make_shared<RequestWork>(std::move(req), transport_.get(), std::move(what),
                                            std::chrono::milliseconds(config_.timeout_ms)));
}

namespace {
// The one buffer of a send (read) or a recv (written).
DeviceIo P2PIo(bool is_send, void* buf, size_t bytes) {
  return is_send ? DeviceIo{buf, bytes, nullptr, 0} : DeviceIo{nullptr, 0, buf, bytes};
}

// A call's windows on host buffers, in turn (stops at the first error).
Status RunOnHost(const StagedRuns& runs) {
  for (const StagedWindow& w : runs) CHORUS_RETURN_IF_ERROR(w.run(w.io.send, w.io.recv, nullptr));
  return Status::Ok();
}
}  // namespace

HostRun CommunicatorImpl::P2PRun(bool is_send, size_t bytes, int peer, uint32_t tag, std::string what) {
  return
      [this, is_send, bytes, peer, tag, what = std::move(what)](const void* send, void* recv, algos::StreamStaging*) {
        return PostP2PHost(is_send, is_send ? const_cast<void*>(send) : recv, bytes, peer, tag, what).Wait();
      };
}

Work CommunicatorImpl::PostP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag) {
  Result<std::string> what = CheckP2P(is_send, buf, bytes, peer, tag);
  if (!what.ok()) return Work::Failed(what.status());
  if (bytes > 0 && kernels::cuda::PointerKind(buf) == kernels::cuda::MemoryKind::kDevice) {
    return Work::Failed(
        InvalidArgument(what.value() +
                        ": the buffer is device memory; ISend/IRecv take host buffers (use Send/Recv, which stage "
                        "device buffers, or the CUDA-stream form)"));
  }
  return PostP2PHost(is_send, buf, bytes, peer, tag, std::move(what.value()));
}

Status CommunicatorImpl::RunP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag) {
  Result<std::string> what = CheckP2P(is_send, buf, bytes, peer, tag);
  if (!what.ok()) return what.status();
  if (bytes == 0 || kernels::cuda::PointerKind(buf) != kernels::cuda::MemoryKind::kDevice) {
    return PostP2PHost(is_send, buf, bytes, peer, tag, std::move(what.value())).Wait();
  }
  return device_->RunNow({{P2PIo(is_send, buf, bytes), P2PRun(is_send, bytes, peer, tag, std::move(what.value()))}},
                         config_.timeout_ms);
}

algos::Context CommunicatorImpl::NewContext(const CollectiveCall& call, algos::Algorithm algorithm) {
  algos::Context ctx{*transport_, coll_seq_.fetch_add(1),
                     algos::WithAlgorithm(algos::Fingerprint(call.kind, call.count, call.dtype, call.op, call.root),
                                          static_cast<int>(algorithm)),
                     Deadline::AfterMs(config_.timeout_ms)};
  ctx.scratch = scratch_.get();
  return ctx;
}

Status CommunicatorImpl::Choose(const CollectiveCall& call, const CollectiveCall& whole,
                                std::optional<algos::Context>* ctx, algos::Algorithm* algorithm) {
  CHORUS_RETURN_IF_ERROR(Validate(call, rank_, size_));
  CHORUS_RETURN_IF_ERROR(CheckUsable());
  const algos::Choice choice = selector_->Choose(call.kind, call.bytes(size_), size_, LogEnabled(LogLevel::kTrace));
  *algorithm = choice.algorithm;
  ctx->emplace(NewContext(whole, choice.algorithm));  // a window fingerprints as its whole call
  CHORUS_TRACE(algos::DescribeFingerprint((*ctx)->fingerprint)
               << " #" << (*ctx)->seq << ": " << algos::AlgorithmName(choice.algorithm) << " (" << choice.reason
               << ")");
  return Status::Ok();
}

Result<HostRun> CommunicatorImpl::Prepare(const CollectiveCall& call, DeviceIo* io, const CollectiveCall& whole) {
  std::optional<algos::Context> chosen;
  algos::Algorithm algorithm{};
  CHORUS_RETURN_IF_ERROR(Choose(call, whole, &chosen, &algorithm));
  io->streamed = algos::Streams(call.kind, algorithm);
  if (io->streamed) {
    io->input_order = algos::InputReadOrder(call.kind, algorithm, rank_, size_, call.count, call.dtype);
  }
  return HostRun(
      [this, ctx = *chosen, call, algorithm](const void* send, void* recv, algos::StreamStaging* staging) mutable {
        CollectiveCall on = call;  // the caller's buffers, or their host bounce buffers
        on.send = send;
        on.recv = recv;
        ctx.staging = staging;
        ctx.deadline = Deadline::AfterMs(config_.timeout_ms);  // from the start of the run, not of the queueing
        return RunChosen(ctx, on, algorithm);
      });
}

Status CommunicatorImpl::RunChosen(algos::Context& ctx, const CollectiveCall& call, algos::Algorithm algorithm) {
  Status st = Dispatch(ctx, call, algorithm, tuning_);
  if (!st.ok()) {
    // Peers may be mid-schedule: nothing after a failed collective can be trusted.
    st = st.WithContext("rank " + std::to_string(rank_) + " " + algos::DescribeFingerprint(ctx.fingerprint) + " (" +
                        algos::AlgorithmName(algorithm) + ")");
    transport_->Abort(st);
    return st;
  }
  // Every message of this call has been matched here: the transport may forget its tags.
  transport_->ReleaseTags(algos::CollectiveTag(ctx.seq, 0), algos::CollectiveTag(ctx.seq, transport::kMaxTagStep));
  return st;
}

Result<IoPlace> CommunicatorImpl::PlaceOf(const CollectiveCall& call, const DeviceIo& io) const {
  Result<IoPlace> place = ClassifyIo(io);
  if (!place.ok()) return place.status().WithContext(CallName(call, rank_));  // the name only when it is needed
  if (place.value() == IoPlace::kDevice && call.kind == algos::Collective::kBroadcast && call.send != call.recv &&
      rank_ == call.root) {
    return InvalidArgument(CallName(call, rank_) +
                           ": out of place takes host buffers (device buffers: the CUDA-stream form, in place)");
  }
  return place;
}

Result<StagedRuns> CommunicatorImpl::PrepareWindows(const CollectiveCall& call) {
  StagedRuns runs;
  for (const CollectiveCall& w : StagingWindows(call, static_cast<size_t>(config_.staging_window_bytes))) {
    DeviceIo io = CallIo(w, rank_, size_);
    Result<HostRun> run = Prepare(w, &io, call);
    if (!run.ok()) {
      // A window already prepared took a sequence number its peers will run: say so.
      if (!runs.empty()) transport_->Abort(run.status().WithContext(CallName(call, rank_)));
      return run.status();
    }
    runs.push_back({io, std::move(run.value())});
  }
  return runs;
}

Status CommunicatorImpl::Run(const CollectiveCall& call) {
  DeviceIo io = CallIo(call, rank_, size_);
  Result<IoPlace> place = PlaceOf(call, io);
  if (!place.ok()) return place.status();
  if (place.value() == IoPlace::kDevice) {
    if (std::optional<Work> w = TryCudaIpc(call, io, std::nullopt)) return w->Wait();
  }
  if (place.value() == IoPlace::kHost &&
      WindowElems(call, static_cast<size_t>(config_.staging_window_bytes)) >= call.count) {
    // Host buffers in one window (every small call): straight to the algorithm, with
    // nothing allocated on the way.
    std::optional<algos::Context> ctx;
    algos::Algorithm algorithm{};
    CHORUS_RETURN_IF_ERROR(Choose(call, call, &ctx, &algorithm));
    return RunChosen(*ctx, call, algorithm);
  }
  Result<StagedRuns> runs = PrepareWindows(call);
  if (!runs.ok()) return runs.status();
  if (place.value() == IoPlace::kDevice) return device_->RunNow(runs.value(), config_.timeout_ms);
  return RunOnHost(runs.value());
}

Work CommunicatorImpl::Post(const CollectiveCall& call) {
  DeviceIo io = CallIo(call, rank_, size_);
  Result<IoPlace> place = PlaceOf(call, io);
  if (!place.ok()) return Work::Failed(place.status());
  Result<StagedRuns> runs = PrepareWindows(call);
  if (!runs.ok()) return Work::Failed(runs.status());
  auto state = std::make_shared<TaskState>(std::chrono::milliseconds(config_.timeout_ms),
                                           std::chrono::microseconds(config_.spin_us));
  if (place.value() == IoPlace::kHost) {
    executor_->Post([runs = std::move(runs.value())] { return RunOnHost(runs); }, state);
  } else {
    executor_->Post(
        [this, runs = std::move(runs.value())] {
          return device_->RunNow(runs, config_.timeout_ms, /*on_executor=*/true);
        },
        state);
  }
  return Work(state);
}

Work CommunicatorImpl::EnqueueOn(void* stream, const DeviceIo& io, const std::string& what,
                                 const std::function<Result<StagedRuns>()>& prepare) {
  Status st = device_->Ready(io).WithContext(what);
  if (!st.ok()) return Work::Failed(st);
  Result<StagedRuns> runs = prepare();
  if (!runs.ok()) return Work::Failed(runs.status());
  return device_->Enqueue(stream, std::move(runs.value()), *executor_, config_.timeout_ms, what,
                          [this](const Status& why) { transport_->Abort(why); });
}

std::optional<Work> CommunicatorImpl::TryCudaIpc(const CollectiveCall& call, const DeviceIo& io,
                                                 std::optional<void*> caller_stream) {
  std::lock_guard<std::mutex> lock(ipc_mu_);
  const algos::DevicePlacement where{local_size_ == size_,      ipc_turned_off_,      ipc_declined_, gpu_time_sliced_,
                                     caller_stream.has_value(), time_sliced_signals_, ipc_flags_};
  const algos::Choice choice = selector_->ChooseForDevice(call.kind, call.bytes(size_), size_, where);
  if (choice.algorithm != algos::Algorithm::kCudaIpc) return std::nullopt;
  if (Status st = Validate(call, rank_, size_); !st.ok()) return Work::Failed(st);
  if (Status st = CheckUsable(); !st.ok()) return Work::Failed(st);
  // The peers go on into this call: where this rank cannot, they must hear why.
  auto broken = [&](const Status& why) {
    Status st = why.WithContext(CallName(call, rank_) + " through CUDA IPC");
    transport_->Abort(st);
    return Work::Failed(st);
  };
  // The call runs on its buffers' device (which need not be the thread's current one).
  Result<int> device = DeviceOfIo(io);
  if (!device.ok()) return broken(device.status());
  Result<kernels::cuda::DeviceGuard> on_device = kernels::cuda::DeviceGuard::Set(device.value());
  if (!on_device.ok()) return broken(on_device.status());
  std::unique_ptr<IpcDevice>& per_device = ipc_[device.value()];
  if (!per_device) {
    // Loaded now, not at a first launch inside the call (kernels::cuda::LoadKernels).
    if (Status st = kernels::cuda::LoadKernels(); !st.ok()) return broken(st);
    per_device = std::make_unique<IpcDevice>();
    per_device->state.always = config_.cuda_ipc == CudaIpcMode::kAlways;
    per_device->state.split_on_one_gpu = config_.cuda_ipc_one_gpu == CudaIpcOneGpu::kSplit;
    per_device->state.mps = kernels::cuda::MpsEnabled();
    per_device->state.sync.want_flags = config_.cuda_ipc_sync == CudaIpcSync::kFlags;
    per_device->state.signal_flags =
        config_.staging_sync == StagingSync::kSignals && kernels::cuda::SignalFlags::DriverHasThem();
  }
  void* stream = caller_stream.value_or(nullptr);
  if (!caller_stream) {  // the host form: the inputs are ready, no stream of the caller's to follow
    if (per_device->host_form_stream.get() == nullptr) {
      Result<kernels::cuda::Stream> made = kernels::cuda::Stream::Create();
      if (!made.ok()) return broken(made.status());
      per_device->host_form_stream = std::move(made.value());
    }
    stream = per_device->host_form_stream.get();
  }
  const algos::Context ctx = NewContext(call, choice.algorithm);
  const std::string what = "rank " + std::to_string(rank_) + " " + algos::DescribeFingerprint(ctx.fingerprint);
  CHORUS_TRACE(what << " #" << ctx.seq << ": cuda_ipc (" << choice.reason << ")");
  const algos::DeviceCall dc{call.kind,  call.send,  io.send_bytes, call.recv, io.recv_bytes,
                             call.count, call.dtype, call.op,       call.root};
  Result<algos::IpcOutcome> out = algos::RunCudaIpc(ctx, dc, per_device->state, stream);
  if (!out.ok()) {
    // Peers may have enqueued their part: they must hear that this call failed.
    Status st = out.status().WithContext(what + " (cuda_ipc)");
    transport_->Abort(st);
    return Work::Failed(st);
  }
  transport_->ReleaseTags(algos::CollectiveTag(ctx.seq, 0), algos::CollectiveTag(ctx.seq, transport::kMaxTagStep));
  if (!out.value().ran) {
    CHORUS_INFO(what << ": CUDA IPC declined (" << out.value().why << "), staged through host memory instead"
                     << (out.value().for_good ? " from now on" : ""));
    if (out.value().for_good) ipc_declined_ = out.value().why.empty() ? "a rank cannot" : out.value().why;
    return std::nullopt;
  }
  device_calls_ipc_.fetch_add(1);
  if (out.value().flags) device_calls_ipc_flags_.fetch_add(1);
  if (!out.value().no_flags.empty()) {
    CHORUS_INFO(what << ": CUDA IPC orders the ranks' streams with interprocess events, not flags ("
                     << out.value().no_flags << ")");
  }
  ipc_flags_ = out.value().flags;
  if (gpu_time_sliced_.empty() && !out.value().time_sliced.empty()) {
    gpu_time_sliced_ = out.value().time_sliced;
    time_sliced_signals_ = out.value().every_rank_signals;
    if (ipc_flags_) {
      CHORUS_INFO("rank " << rank_ << ": " << gpu_time_sliced_ << ": the streams hand the GPU over with flags, "
                          << "so calls of every size keep CUDA IPC");
    } else {
      CHORUS_INFO("rank " << rank_ << ": " << gpu_time_sliced_ << ": host-form calls up to "
                          << (algos::kTimeSlicedStagedMaxBytes >> 20) << " MiB"
                          << (time_sliced_signals_
                                  ? ", stream-form ones up to " +
                                        std::to_string(algos::kTimeSlicedStreamStagedMaxBytes >> 10) + " KiB,"
                                  : "")
                          << " are staged from now on (flags or MPS avoid that)");
    }
  }
  return WorkUntilEvent(out.value().end, config_.timeout_ms, what);
}

Work CommunicatorImpl::Enqueue(const CollectiveCall& call, void* stream) {
  const std::string what = CallName(call, rank_);
  DeviceIo io = CallIo(call, rank_, size_);
  if (Status st = CheckStreamIo(io, what); !st.ok()) return Work::Failed(st);
  if (std::optional<Work> w = TryCudaIpc(call, io, stream)) return std::move(*w);
  return EnqueueOn(stream, io, what, [&] { return PrepareWindows(call); });
}

TrafficCounters CommunicatorImpl::Counters() const {
  TrafficCounters c = transport_ ? transport_->counters() : TrafficCounters{};
  c.device_calls_ipc = device_calls_ipc_.load();
  c.device_calls_ipc_flags = device_calls_ipc_flags_.load();
  c.device_calls_staged = device_ ? device_->staged() : 0;
  c.device_calls_signalled = device_ ? device_->signalled() : 0;
  return c;
}

Work CommunicatorImpl::EnqueueP2P(bool is_send, void* buf, size_t bytes, int peer, uint32_t tag, void* stream) {
  Result<std::string> what = CheckP2P(is_send, buf, bytes, peer, tag);
  if (!what.ok()) return Work::Failed(what.status());
  const DeviceIo io = P2PIo(is_send, buf, bytes);
  if (Status st = CheckStreamIo(io, what.value()); !st.ok()) return Work::Failed(st);
  return EnqueueOn(stream, io, what.value(), [&]() -> Result<StagedRuns> {
    return StagedRuns{{io, P2PRun(is_send, bytes, peer, tag, what.value())}};
  });
}

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::Split(int color, int key) {
  CHORUS_RETURN_IF_ERROR(CheckUsable());
  const Deadline deadline = Deadline::AfterMs(config_.connect_timeout_ms);
  const std::string split_prefix = prefix_ + "split" + std::to_string(split_seq_.fetch_add(1)) + "/";
  // Every rank publishes (color, key); members of a color sort by (key, old rank).
  PhaseClock phases;
  Result<std::vector<std::string>> all = rendezvous::AllGather(
      *rdv_->store, split_prefix + "colors", rank_, size_, std::to_string(color) + " " + std::to_string(key), deadline);
  if (!all.ok()) return all.status().WithContext("split on rank " + std::to_string(rank_));
  if (color < 0) return std::unique_ptr<CommunicatorImpl>();
  phases.Mark("colors");
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  for (int r = 0; r < size_; ++r) {
    std::istringstream in(all.value()[r]);
    int c = 0, k = 0;
    if (!(in >> c >> k)) return ProtocolError("split: rank " + std::to_string(r) + " published garbage");
    if (c == color) members.push_back({k, r});
  }
  std::sort(members.begin(), members.end());
  std::unique_ptr<CommunicatorImpl> child(new CommunicatorImpl());
  child->config_ = config_;
  child->spec_ = spec_;
  child->rdv_ = rdv_;
  child->size_ = static_cast<int>(members.size());
  for (int i = 0; i < child->size_; ++i) {
    if (members[i].second == rank_) child->rank_ = i;
  }
  CHORUS_RETURN_IF_ERROR(child->Connect(split_prefix + "color" + std::to_string(color) + "/", phases));
  return child;
}

Status CommunicatorImpl::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return Status::Ok();
  shut_down_ = true;
  executor_.reset();  // finishes the async collectives already posted
  {
    // Peers' streams may still wait on this rank's flags or interprocess events and read
    // its buffers: let the GPU finish before the barrier, after which they go.
    std::lock_guard<std::mutex> ipc_lock(ipc_mu_);
    for (const auto& [device, state] : ipc_) {
      Status st = transport::cuda_ipc::SynchronizeDevice(device);
      if (!st.ok()) CHORUS_WARN("shutting down CUDA IPC on device " << device << ": " << st.ToString());
    }
  }
  Status result;
  bool all_left = false;  // every rank passed the shutdown barrier
  if (connected_ && transport_ && transport_->health().ok() && rdv_ && rdv_->store) {
    // Wait (bounded) until every rank is shutting down, so that no rank closes its
    // connections while a peer still expects bytes on them.
    const Deadline deadline = Deadline::AfterMs(std::min<int64_t>(config_.timeout_ms, 60 * 1000));
    result = rendezvous::Barrier(*rdv_->store, prefix_ + "shutdown", rank_, size_, deadline);
    all_left = result.ok();
  }
  transport_.reset();
  {
    // Every rank is past its calls: the CUDA IPC state goes, each on its own device
    // (mappings, flags and events belong to that device's context).
    std::lock_guard<std::mutex> ipc_lock(ipc_mu_);
    for (auto& [device, state] : ipc_) {
      Result<kernels::cuda::DeviceGuard> on_device = kernels::cuda::DeviceGuard::Set(device);
      state.reset();
    }
    ipc_.clear();
  }
  if (all_left && membership_) membership_->Release(*rdv_->store);
  if (all_left && spec_.method != "store") {
    // The store's host must leave last: the others may still be reading the
    // barrier's answer. A failure here only means a rank left early: harmless. A
    // failed communicator skips it: its ranks need the store no more, and a dead one
    // would only be waited for.
    Status st = rendezvous::Barrier(*rdv_->store, prefix_ + "left", rank_, size_, Deadline::AfterMs(10 * 1000));
    if (!st.ok()) CHORUS_INFO("not every rank confirmed leaving: " << st.ToString());
  }
  rdv_.reset();
  return result;
}

void CommunicatorImpl::Abort(const Status& reason) {
  if (transport_) transport_->Abort(reason);
}

}  // namespace chorus::internal
