#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "common/log.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace chorus::transport {
using namespace shm;  // NOLINT: the layout's words are this file's vocabulary

namespace {

// The proxy thread drives once no application thread has for this long.
constexpr auto kProxyHandBack = std::chrono::milliseconds(2);
// How long sleepers sleep at most before they look at deadlines again.
constexpr auto kMaxSleep = std::chrono::milliseconds(100);
// A spinning waiter takes the lock without work in sight this often (deadlines).
constexpr auto kHousekeeping = std::chrono::microseconds(500);

// Process `pid`'s state in /proc (R, S, T, Z, ...), or 0 where it has none.
char ProcessState(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the command name may hold anything
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

// Stopped: by a signal (T) or a tracer (t).
bool ProcessStopped(pid_t pid) {
  const char s = ProcessState(pid);
  return s == 'T' || s == 't';
}

// Exited (a zombie not yet reaped counts), or never was.
bool ProcessGone(pid_t pid) {
  const char s = ProcessState(pid);
  return s == 0 || s == 'Z' || s == 'X';
}

int64_t NowNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The kernel's tick-old time (no clock read): enough for deadlines of seconds, and
// comparable with Clock (both CLOCK_MONOTONIC). Two requests a call each take one.
Clock::time_point CoarseNow() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

// Copies `bytes` between this process's `local` and process pid's `remote`, reading
// them (process_vm_readv) or writing them (process_vm_writev): 0, or the errno.
int CopyWithProcess(pid_t pid, char* local, uint64_t remote, uint64_t bytes, bool write) {
  if (pid == getpid()) {
    if (bytes == 0) return 0;
    void* there = reinterpret_cast<void*>(remote);
    write ? std::memcpy(there, local, bytes) : std::memcpy(local, there, bytes);
    return 0;
  }
  uint64_t done = 0;
  while (done < bytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - done, uint64_t{1} << 30));
    struct iovec mine = {local + done, n};
    struct iovec theirs = {reinterpret_cast<void*>(remote + done), n};
    const ssize_t got =
        write ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0) : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? errno : EIO;
    done += static_cast<uint64_t>(got);
  }
  return 0;
}

// Between threads of one process (tests), ThreadSanitizer sees no order through the
// segments, mapped once per rank at two addresses: a buffer written by the sender for
// its reader (kPut) is handed over by these, keyed by the buffer's address.
#if defined(__SANITIZE_THREAD__)
inline void HandOver(const void* buf) { __tsan_release(const_cast<void*>(buf)); }
inline void TakeOver(const void* buf) { __tsan_acquire(const_cast<void*>(buf)); }
#else
inline void HandOver(const void*) {}
inline void TakeOver(const void*) {}
#endif

// The request filed under `cookie` (a kRts sent, a kCts asked for), or list.end().
using CookieList = std::vector<std::pair<uint64_t, BasicRequestPtr>>;
CookieList::iterator FindCookie(CookieList& list, uint64_t cookie) {
  return std::find_if(list.begin(), list.end(), [cookie](const auto& e) { return e.first == cookie; });
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

// ---- TagQueues ----

ShmTransport::TagQueue& ShmTransport::TagQueues::Get(uint64_t tag) {
  for (auto& q : live) {
    if (q->tag == tag) return *q;
  }
  if (spare.empty()) {
    live.push_back(std::make_unique<TagQueue>());
  } else {
    live.push_back(std::move(spare.back()));
    spare.pop_back();
  }
  live.back()->tag = tag;
  return *live.back();
}

void ShmTransport::TagQueues::RetireIfIdle(TagQueue& q) {
  if (!q.idle()) return;
  q.recvs.clear();
  q.early.clear();
  q.recv_head = q.early_head = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    if (live[i].get() != &q) continue;
    spare.push_back(std::move(live[i]));
    live[i] = std::move(live.back());
    live.pop_back();
    return;
  }
}

// ---- Set-up ----

size_t ShmRingBytes(int local_ranks) {
  const size_t peers = static_cast<size_t>(std::max(1, local_ranks - 1));
  size_t ring = kShmRingBytes;
  while (ring > kShmMinRingBytes && ring * peers > kShmRingsPerRankBytes) ring /= 2;
  return ring;
}

ShmTransport::ShmTransport(const ShmOptions& opts)
    : opts_(opts),
      size_(opts.size),
      ring_bytes_(opts.ring_bytes != 0 ? opts.ring_bytes : ShmRingBytes(static_cast<int>(opts.local_ranks.size()))),
      local_index_(opts.size, -1),
      early_bufs_(static_cast<size_t>(std::max<int64_t>(opts.early_cache_bytes, 0))) {
  for (size_t i = 0; i < opts_.local_ranks.size(); ++i) local_index_[opts_.local_ranks[i]] = static_cast<int>(i);
}

Result<std::unique_ptr<ShmTransport>> ShmTransport::Create(const ShmOptions& opts) {
  if (opts.size < 1 || opts.rank < 0 || opts.rank >= opts.size) return InvalidArgument("shm: bad rank or size");
  if (std::find(opts.local_ranks.begin(), opts.local_ranks.end(), opts.rank) == opts.local_ranks.end() ||
      !std::is_sorted(opts.local_ranks.begin(), opts.local_ranks.end())) {
    return InvalidArgument("shm: local ranks must be sorted and include rank " + std::to_string(opts.rank));
  }
  if (opts.ring_bytes != 0 && (opts.ring_bytes < kShmMinRingBytes || (opts.ring_bytes & (opts.ring_bytes - 1)) != 0)) {
    return InvalidArgument("shm: rings of " + std::to_string(opts.ring_bytes) + " bytes: a power of two from " +
                           std::to_string(kShmMinRingBytes) + " is needed");
  }
  std::unique_ptr<ShmTransport> t(new ShmTransport(opts));
  const int n = static_cast<int>(opts.local_ranks.size());
  std::ostringstream path;
  // The random part: processes in separate pid namespaces (containers, a test sandbox)
  // may share both the pid and the directory.
  path << opts.dir << "/chorus-" << std::hex << opts.comm_id << std::dec << "-r" << opts.rank << "-p" << getpid() << "-"
       << std::hex << std::random_device()();
  const size_t ring = t->ring_bytes_;
  Result<Segment> seg = Segment::Create(path.str(), SegmentBytes(n, ring));
  if (!seg.ok()) return seg.status().WithContext("rank " + std::to_string(opts.rank));
  t->segment_ = std::move(seg.value());
  t->ctl_ = new (t->segment_.base()) Control();
  for (int i = 0; i < n; ++i) new (SlotAt(t->segment_.base(), i, ring)) Slot();
  t->ctl_->self_addr = reinterpret_cast<uint64_t>(t->segment_.base());
  t->ctl_->pid = getpid();
  t->ctl_->rank = opts.rank;
  t->ctl_->nslots = n;
  t->ctl_->ring_bytes = static_cast<uint32_t>(ring);
  t->ctl_->magic = kMagic;
  t->peers_.resize(n);
  for (int i = 0; i < n; ++i) {
    if (opts.local_ranks[i] == opts.rank) continue;
    auto p = std::make_unique<Peer>();
    p->rank = opts.local_ranks[i];
    p->index = i;
    p->in = SlotAt(t->segment_.base(), i, ring);
    t->peers_[i] = std::move(p);
  }
  return t;
}

Status ShmTransport::Connect(const std::vector<std::string>& paths, const std::vector<int>& pids) {
  const int n = static_cast<int>(opts_.local_ranks.size());
  if (static_cast<int>(paths.size()) != n || static_cast<int>(pids.size()) != n) {
    return InvalidArgument("shm: Connect needs a path and a pid per local rank");
  }
  const int me = local_index_[opts_.rank];
  for (auto& pp : peers_) {
    if (!pp) continue;
    Peer& p = *pp;
    Result<Segment> seg = Segment::Open(paths[p.index], SegmentBytes(n, ring_bytes_));
    if (!seg.ok()) return seg.status().WithContext("rank " + std::to_string(opts_.rank) + ", " + PeerDesc(p.rank));
    p.segment = std::move(seg.value());
    p.ctl = ControlAt(p.segment.base());
    if (p.ctl->magic != kMagic || p.ctl->rank != p.rank || p.ctl->pid != pids[p.index] || p.ctl->nslots != n ||
        p.ctl->ring_bytes != ring_bytes_) {
      return ProtocolError("rank " + std::to_string(opts_.rank) + ": shared-memory segment " + paths[p.index] +
                           " is not " + PeerDesc(p.rank) + "'s");
    }
    p.pid = p.ctl->pid;
    p.out = SlotAt(p.segment.base(), me, ring_bytes_);
    p.in->single_copy.store(SingleCopyFrom(p) ? 1 : 0, std::memory_order_release);
  }
  return Status::Ok();
}

bool ShmTransport::SingleCopyFrom(const Peer& p) {
  if (opts_.single_copy == SingleCopy::kOff) return false;
  if (p.pid == getpid()) return opts_.single_copy == SingleCopy::kOn;
  // Where ranks outnumber cores, a send that waits for its reader to be scheduled costs
  // more than the rings, which let the sender finish on its own.
  if (opts_.single_copy == SingleCopy::kAuto && opts_.crowded) return false;
  // Can we read the peer? Its segment's first word, through the peer's own address.
  uint64_t word = 0;
  struct iovec local = {&word, sizeof(word)};
  struct iovec remote = {reinterpret_cast<void*>(p.ctl->self_addr), sizeof(word)};
  if (process_vm_readv(p.pid, &local, 1, &remote, 1, 0) != sizeof(word) || word != kMagic) {
    CHORUS_INFO("rank " << opts_.rank << ": cannot read " << PeerDesc(p.rank) << "'s memory (process_vm_readv: "
                        << std::strerror(errno) << "): its large messages come through the ring");
    return false;
  }
  return true;
}

Status ShmTransport::Start() {
  segment_.Unlink();
  for (auto& pp : peers_) {
    if (!pp) continue;
    Peer& p = *pp;
    p.single_copy = p.out->single_copy.load(std::memory_order_acquire) != 0;
    if (!p.single_copy || p.in->single_copy.load(std::memory_order_relaxed) == 0) streams_ = true;
  }
  proxy_ = std::thread([this] { ProxyLoop(); });
  return Status::Ok();
}

ShmTransport::~ShmTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ > 0 && !aborted_) {
      AbortLocked(AbortedError("rank " + std::to_string(opts_.rank) + ": transport destroyed with requests pending"));
    }
    if (!aborted_ && ctl_ != nullptr) Announce(PeerState::kClosed);
  }
  stop_.store(true);
  if (ctl_ != nullptr) {
    ctl_->doorbell.fetch_add(1);
    FutexWakeAll(&ctl_->doorbell);
  }
  if (proxy_.joinable()) proxy_.join();
}

std::string ShmTransport::PeerDesc(int peer) const {
  std::string s = "rank " + std::to_string(peer);
  if (IsLocal(peer) && peer != opts_.rank) s += " (pid " + std::to_string(peers_[local_index_[peer]]->pid) + ")";
  return s;
}

std::string ShmTransport::Describe() const {
  int n = 0, single = 0;
  for (const auto& p : peers_) {
    if (!p) continue;
    ++n;
    single += p->single_copy ? 1 : 0;
  }
  return "shm (" + std::to_string(n + 1) + " ranks on this host, rings of " + std::to_string(ring_bytes_ >> 10) +
         " KiB; single copy to " + std::to_string(single) + " of " + std::to_string(n) + " peers)";
}

// ---- Posting ----

bool ShmTransport::Admit(BasicRequest& req) {
  const bool send = req.kind() == BasicRequest::Kind::kSend;
  Status st = ValidatePost(opts_.rank, size_, send, req.peer(), req.buf(), req.bytes());
  if (st.ok() && aborted_) st = abort_status_;
  if (st.ok() && req.peer() != opts_.rank) {
    if (const Peer* p = LocalPeer(req.peer())) {
      st = p->gone;
    } else {
      st = InvalidArgument("rank " + std::to_string(opts_.rank) + ": " + (send ? "send to" : "recv from") + " rank " +
                           std::to_string(req.peer()) +
                           ", which is on another host (shared memory reaches this host's ranks only)");
    }
  }
  if (st.ok()) return true;
  req.Complete(st);
  return false;
}

RequestPtr ShmTransport::Send(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t fingerprint) {
  auto req = std::make_shared<BasicRequest>(BasicRequest::Kind::kSend, opts_.rank, peer, tag, const_cast<void*>(buf),
                                            bytes, fingerprint, 0, this);
  std::lock_guard<std::mutex> lock(mu_);
  if (!Admit(*req)) return req;
  if (peer == opts_.rank) {
    SelfSend(req);
    return req;
  }
  Peer& p = *LocalPeer(peer);
  Watch(p);
  ++active_;
  deadlines_.Track(req, CoarseNow());
  OutFrame of;
  of.send = req;
  if (bytes >= LargeMinBytes(p)) {
    const uint64_t cookie = p.next_cookie++;
    const uint64_t addr = p.single_copy ? reinterpret_cast<uint64_t>(buf) : 0;
    of.frame = {FrameType::kRts, 0, tag, fingerprint, bytes, addr, cookie};
    p.awaiting_ack.emplace_back(cookie, req);
  } else {
    of.frame = {FrameType::kData, 0, tag, fingerprint, bytes, 0, 0};
  }
  Queue(p, std::move(of));
  return req;
}

RequestPtr ShmTransport::Recv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t fingerprint) {
  auto req = std::make_shared<BasicRequest>(BasicRequest::Kind::kRecv, opts_.rank, peer, tag, buf, bytes, fingerprint,
                                            0, this);
  std::lock_guard<std::mutex> lock(mu_);
  if (!Admit(*req)) return req;
  if (peer == opts_.rank) {
    SelfRecv(req);
    return req;
  }
  Peer& p = *LocalPeer(peer);
  Watch(p);
  ++active_;
  deadlines_.Track(req, CoarseNow());
  TagQueue& q = p.tags.Get(tag);
  q.recvs.push_back(req);
  if (fingerprint != 0) {
    if (uint64_t other = p.groups.Declare(TagGroup(tag), fingerprint)) {
      // Stays queued, failed: it swallows the message it would have matched.
      Finish(req, GroupMismatch(opts_.rank, peer, tag), other);
    }
  }
  MatchQueued(p, q);
  AbortIfDeferred();
  return req;
}

void ShmTransport::SelfSend(const BasicRequestPtr& req) {
  TagQueue& q = self_tags_.Get(req->tag());
  if (q.early_head == q.early.size() && q.recv_head < q.recvs.size()) {
    BasicRequestPtr r = std::move(q.recvs[q.recv_head++]);
    if (!r->Test()) {
      Status st = CheckMatch(opts_.rank, opts_.rank, req->tag(), req->bytes(), req->fingerprint(), *r);
      if (st.ok() && req->bytes() > 0) std::memcpy(r->buf(), req->buf(), req->bytes());
      Finish(r, st, req->fingerprint());
    }
  } else {
    auto e = std::make_unique<Early>();
    e->fingerprint = req->fingerprint();
    e->total = e->got = req->bytes();
    if (req->bytes() > sizeof(e->small)) e->buf = TakeBuffer(&early_bufs_, req->bytes());
    if (req->bytes() > 0) std::memcpy(e->data(), req->buf(), req->bytes());
    q.early.push_back(std::move(e));
  }
  self_tags_.RetireIfIdle(q);
  req->Complete(Status::Ok());
}

void ShmTransport::SelfRecv(const BasicRequestPtr& req) {
  ++active_;
  deadlines_.Track(req, CoarseNow());
  TagQueue& q = self_tags_.Get(req->tag());
  if (q.early_head < q.early.size()) {
    std::unique_ptr<Early> e = std::move(q.early[q.early_head++]);
    Status st = CheckMatch(opts_.rank, opts_.rank, req->tag(), e->total, e->fingerprint, *req);
    if (st.ok() && e->total > 0) std::memcpy(req->buf(), e->data(), e->total);
    Finish(req, st, e->fingerprint);
  } else {
    q.recvs.push_back(req);
  }
  self_tags_.RetireIfIdle(q);
}

void ShmTransport::ReleaseTags(uint64_t first, uint64_t last) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : peers_) {
    if (p) p->groups.Erase(TagGroup(first), TagGroup(last));
  }
}

// ---- Sending ----

void ShmTransport::Queue(Peer& p, OutFrame of) {
  p.outq.push_back(std::move(of));
  PushOut(p);
}

void ShmTransport::SendControl(Peer& p, FrameType type, uint64_t cookie, uint64_t arg) {
  OutFrame of;
  of.frame = {type, 0, 0, 0, 0, arg, cookie};
  Queue(p, std::move(of));
}

bool ShmTransport::WriteFrame(Peer& p, const Frame& f, const void* payload) {
  const size_t need = FrameBytes(f.len);
  const size_t ring = ring_bytes_;
  size_t pos = p.out_head & (ring - 1);
  // The reader's tail is a line it writes: read it (a cache miss) only when the last
  // value read leaves too little room.
  const size_t worst = need + (pos + need > ring ? ring - pos : 0);
  if (ring - (p.out_head - p.out_tail) < worst) p.out_tail = p.out->tail.load(std::memory_order_acquire);
  size_t free = ring - (p.out_head - p.out_tail);
  char* data = RingData(p.out);
  if (pos + need > ring) {  // frames never wrap: pad to the end
    const size_t pad = ring - pos;
    if (free < pad + need) return false;
    Frame padf{FrameType::kPad, 0, 0, 0, 0, 0, 0};
    std::memcpy(data + pos, &padf, sizeof(padf));
    p.out_head += pad;
    free -= pad;
    pos = 0;
  }
  if (free < need) return false;
  std::memcpy(data + pos, &f, sizeof(f));
  if (f.len > 0) std::memcpy(data + pos + sizeof(Frame), payload, f.len);
  p.out_head += need;
  p.out->head.store(p.out_head, std::memory_order_release);
  return true;
}

bool ShmTransport::PushOut(Peer& p) {
  bool wrote = false;
  while (p.outq_head < p.outq.size()) {
    OutFrame& of = p.outq[p.outq_head];
    if (of.frame.type == FrameType::kData) {
      bool full = false;
      do {
        Frame f = of.frame;
        f.len = static_cast<uint32_t>(std::min<uint64_t>(of.frame.total - of.sent, MaxFramePayload()));
        f.arg = of.sent;
        if (!WriteFrame(p, f, of.send->buf() + of.sent)) {
          full = true;
          break;
        }
        wrote = true;
        of.sent += f.len;
      } while (of.sent < of.frame.total);
      if (full) break;
      Finish(of.send, Status::Ok());
    } else {
      if (!WriteFrame(p, of.frame, nullptr)) break;
      wrote = true;
    }
    p.outq[p.outq_head++] = OutFrame();
  }
  const bool blocked = p.outq_head < p.outq.size();
  if (!blocked) {
    p.outq.clear();
    p.outq_head = 0;
  } else {
    p.out_tail_seen.store(p.out->tail.load(std::memory_order_acquire), std::memory_order_relaxed);
  }
  p.out_blocked.store(blocked, std::memory_order_release);
  if (wrote) Ring(p.ctl);
  return wrote;
}

// ---- Receiving ----

bool ShmTransport::DrainRing(Peer& p) {
  const uint64_t head = p.in->head.load(std::memory_order_acquire);
  if (head == p.in_tail) return false;
  const char* data = RingData(p.in);
  while (p.in_tail != head && !aborted_) {
    const size_t pos = p.in_tail & (ring_bytes_ - 1);
    Frame f;
    std::memcpy(&f, data + pos, sizeof(f));
    if (f.type == FrameType::kPad) {
      p.in_tail += ring_bytes_ - pos;
    } else {
      if (FrameBytes(f.len) > ring_bytes_ - pos || FrameBytes(f.len) > head - p.in_tail) {
        AbortLocked(ProtocolError("rank " + std::to_string(opts_.rank) + ": a frame of " + std::to_string(f.len) +
                                  " bytes from " + PeerDesc(p.rank) + " does not fit its ring"));
        return true;
      }
      Status st = OnFrame(p, f, data + pos + sizeof(Frame));
      if (!st.ok() || !deferred_abort_.ok()) {
        AbortLocked(st.ok() ? deferred_abort_ : st);
        return true;
      }
      p.in_tail += FrameBytes(f.len);
    }
    p.in->tail.store(p.in_tail, std::memory_order_release);
  }
  Ring(p.ctl);  // its writer may wait for the space
  return true;
}

Status ShmTransport::OnFrame(Peer& p, const Frame& f, const char* payload) {
  switch (f.type) {
    case FrameType::kData:
      if (f.arg == 0 && p.incoming.active) break;
      if (f.arg != 0 && (!p.incoming.active || f.tag != p.incoming.tag || f.arg != p.incoming.got)) break;
      if (f.arg + f.len > f.total) break;
      OnData(p, f, payload);
      return Status::Ok();
    case FrameType::kRts:
      if (p.incoming.active) break;
      OnRts(p, f);
      return Status::Ok();
    case FrameType::kAck: OnAck(p, f); return Status::Ok();
    case FrameType::kCts: OnCts(p, f); return Status::Ok();
    case FrameType::kPut: OnPut(p, f); return Status::Ok();
    default: break;
  }
  return ProtocolError("rank " + std::to_string(opts_.rank) + ": a malformed frame (type " +
                       std::to_string(static_cast<uint32_t>(f.type)) + ", tag " + std::to_string(f.tag) + ") from " +
                       PeerDesc(p.rank));
}

void ShmTransport::TakeEarly(Early& e, uint64_t bytes) {
  if (bytes > sizeof(e.small)) e.buf = TakeBuffer(&early_bufs_, bytes);
  early_messages_.fetch_add(1, std::memory_order_relaxed);
  early_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void ShmTransport::OnData(Peer& p, const Frame& f, const char* payload) {
  Incoming& in = p.incoming;
  if (f.arg == 0 && !in.active) {  // the first frame of a message
    in.active = true;
    in.tag = f.tag;
    in.total = f.total;
    in.got = 0;
    in.fingerprint = f.fingerprint;
    in.recv.reset();
    in.early = nullptr;
    if (f.cookie != 0) {  // asked for by our kCts: its receive is known, and matched
      in.recv = TakeByCookie(p.streams, f.cookie);
    } else if (p.groups.Arrived(TagGroup(f.tag), f.fingerprint)) {
      FailGroup(p, TagGroup(f.tag), f.fingerprint);
    }
    TagQueue& q = p.tags.Get(f.tag);
    if (f.cookie != 0) {
      p.tags.RetireIfIdle(q);
    } else if (q.early_head == q.early.size() && q.recv_head < q.recvs.size()) {
      BasicRequestPtr r = std::move(q.recvs[q.recv_head++]);
      if (!r->Test()) {  // else it failed already: the message goes nowhere
        Status st = CheckMatch(opts_.rank, p.rank, f.tag, f.total, f.fingerprint, *r);
        if (st.ok()) {
          in.recv = std::move(r);
        } else {
          Finish(r, st, f.fingerprint);
        }
      }
      p.tags.RetireIfIdle(q);
    } else {
      auto e = std::make_unique<Early>();
      e->fingerprint = f.fingerprint;
      e->total = f.total;
      TakeEarly(*e, f.total);
      in.early = e.get();
      q.early.push_back(std::move(e));
    }
  }
  if (in.recv && in.recv->Test()) in.recv.reset();  // failed meanwhile (its group): stop writing
  if (f.len > 0) {
    if (in.recv) {
      std::memcpy(in.recv->buf() + f.arg, payload, f.len);
    } else if (in.early != nullptr) {
      std::memcpy(in.early->data() + f.arg, payload, f.len);
    }
  }
  in.got += f.len;
  if (in.early != nullptr) in.early->got = in.got;
  if (in.got < in.total) return;
  in.active = false;
  if (in.recv) {
    Finish(in.recv, Status::Ok());
    in.recv.reset();
  } else if (in.early != nullptr) {
    in.early = nullptr;
    MatchQueued(p, p.tags.Get(in.tag));
  }
}

void ShmTransport::OnRts(Peer& p, const Frame& f) {
  if (p.groups.Arrived(TagGroup(f.tag), f.fingerprint)) FailGroup(p, TagGroup(f.tag), f.fingerprint);
  auto e = std::make_unique<Early>();
  e->fingerprint = f.fingerprint;
  e->total = f.total;
  e->rts = true;
  e->addr = f.arg;
  e->cookie = f.cookie;
  TagQueue& q = p.tags.Get(f.tag);
  q.early.push_back(std::move(e));
  MatchQueued(p, q);
}

BasicRequestPtr ShmTransport::TakeByCookie(std::vector<std::pair<uint64_t, BasicRequestPtr>>& list, uint64_t cookie) {
  const auto it = FindCookie(list, cookie);
  if (it == list.end()) return nullptr;
  BasicRequestPtr r = std::move(it->second);
  list.erase(it);
  return r;
}

void ShmTransport::OnAck(Peer& p, const Frame& f) {
  BasicRequestPtr s = TakeByCookie(p.awaiting_ack, f.cookie);
  if (!s) return;
  if (static_cast<AckStatus>(f.arg) == AckStatus::kReadFailed) {
    Finish(s, PeerFailed(PeerDesc(p.rank) + " could not read rank " + std::to_string(opts_.rank) + "'s " +
                         s->Describe() + " from its memory"));
  } else {
    Finish(s, Status::Ok());
  }
}

void ShmTransport::OnCts(Peer& p, const Frame& f) {
  OutFrame of;
  of.send = TakeByCookie(p.awaiting_ack, f.cookie);
  if (!of.send) return;
  of.frame = {FrameType::kData, 0, of.send->tag(), of.send->fingerprint(), of.send->bytes(), 0, f.cookie};
  Queue(p, std::move(of));
}

Status ShmTransport::ReadRemote(Peer& p, void* dst, uint64_t addr, uint64_t bytes) {
  if (const int err = CopyWithProcess(p.pid, static_cast<char*>(dst), addr, bytes, false)) {
    // A sender that aborted (its buffer may be gone: EFAULT) or died (ESRCH) is the
    // cause to name, with its own reason.
    if (p.ctl->state.load(std::memory_order_seq_cst) != static_cast<uint32_t>(PeerState::kRunning)) {
      return PeerStateError(p);
    }
    if (err == ESRCH) {
      return PeerFailed(PeerDesc(p.rank) + " exited while rank " + std::to_string(opts_.rank) + " read its message");
    }
    return IoError("rank " + std::to_string(opts_.rank) + ": reading a message of " + std::to_string(bytes) +
                       " bytes from " + PeerDesc(p.rank) + "'s memory",
                   err);
  }
  // The sender may have aborted (and its caller reused the buffer) while we read: the
  // bytes are good only if it was still running after the read.
  if (p.ctl->state.load(std::memory_order_seq_cst) != static_cast<uint32_t>(PeerState::kRunning)) {
    return PeerStateError(p);
  }
  return Status::Ok();
}

Status ShmTransport::ReadTogether(Peer& p, char* dst, uint64_t addr, uint64_t bytes, uint64_t cookie) {
  Slot& slot = *p.in;
  const uint64_t piece = PieceBytes(bytes), pieces = Pieces(bytes);
  slot.written.store(0, std::memory_order_relaxed);
  slot.claim.store(ClaimWord(cookie, 0), std::memory_order_release);
  HandOver(dst);
  SendControl(p, FrameType::kPut, cookie, reinterpret_cast<uint64_t>(dst));
  Status st;
  uint64_t mine = 0, i = 0;
  while (ClaimPiece(slot.claim, cookie, pieces, &i)) {
    ++mine;  // after a failure, pieces are still taken: none is left for the sender
    if (st.ok()) st = ReadRemote(p, dst + i * piece, addr + i * piece, std::min(piece, bytes - i * piece));
  }
  // The sender's pieces: each is a copy already under way, unless the sender died or
  // froze while it wrote, which only its process tells. A frozen one may still write
  // into the buffer: the whole transport stops.
  const auto limit = Clock::now() + std::chrono::milliseconds(opts_.peer_timeout_ms);
  uint64_t written = 0;
  for (unsigned looks = 1; ((written = slot.written.load(std::memory_order_acquire)) & ~kWriteFailed) < pieces - mine;
       ++looks) {
    if (looks % 1024 == 0) {
      const bool gone = ProcessGone(p.pid);
      if (gone || Clock::now() > limit) {
        deferred_abort_ =
            PeerFailed(PeerDesc(p.rank) + (gone ? " exited" : " froze") + " while it wrote its part of a " +
                       std::to_string(bytes) + "-byte message into rank " + std::to_string(opts_.rank) + "'s buffer");
        return deferred_abort_;
      }
    }
    opts_.crowded ? static_cast<void>(sched_yield()) : CpuRelax();
  }
  if (p.pid == getpid()) TakeOver(dst);
  // A piece the sender could not write: read the whole message instead.
  if (st.ok() && (written & kWriteFailed) != 0) st = ReadRemote(p, dst, addr, bytes);
  return st;
}

void ShmTransport::OnPut(Peer& p, const Frame& f) {
  // The send waits for its kAck, which the receiver sends once every piece is in.
  const auto it = FindCookie(p.awaiting_ack, f.cookie);
  if (it == p.awaiting_ack.end()) return;
  BasicRequest& send = *it->second;
  const uint64_t bytes = send.bytes(), piece = PieceBytes(bytes);
  const bool same_process = p.pid == getpid();
  void* dst = reinterpret_cast<void*>(f.arg);
  uint64_t i = 0;
  while (ClaimPiece(p.out->claim, f.cookie, Pieces(bytes), &i)) {
    const uint64_t off = i * piece;
    if (same_process) TakeOver(dst);
    const bool ok = CopyWithProcess(p.pid, send.buf() + off, f.arg + off, std::min(piece, bytes - off), true) == 0;
    if (same_process) HandOver(dst);
    p.out->written.fetch_add(ok ? 1 : 1 | kWriteFailed, std::memory_order_release);
    if (!ok) break;
    written_pieces_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ShmTransport::Deliver(Peer& p, Early& e, const BasicRequestPtr& r) {
  Status st = CheckMatch(opts_.rank, p.rank, r->tag(), e.total, e.fingerprint, *r);
  if (!st.ok()) {
    if (e.rts) SendControl(p, FrameType::kAck, e.cookie, static_cast<uint64_t>(AckStatus::kDiscarded));
    return Finish(r, st, e.fingerprint);
  }
  if (e.rts && e.addr == 0) {  // the sender streams it once asked: its frames land in r
    p.streams.emplace_back(e.cookie, r);
    return SendControl(p, FrameType::kCts, e.cookie, 0);
  }
  if (e.rts) {
    // Where the sender can write into this rank, it is asked to help, unless it is
    // reading too (an exchange: each of two ranks reading together would cut its own
    // read into pieces for nothing). Flag first, then look: one of two sees the other.
    ctl_->reading.store(1, std::memory_order_seq_cst);
    const bool together = e.total >= kTogetherMinBytes && p.single_copy && p.ctl->reading.load() == 0;
    st = together ? ReadTogether(p, r->buf(), e.addr, e.total, e.cookie) : ReadRemote(p, r->buf(), e.addr, e.total);
    ctl_->reading.store(0, std::memory_order_release);
    read_messages_.fetch_add(1, std::memory_order_relaxed);
    SendControl(p, FrameType::kAck, e.cookie,
                static_cast<uint64_t>(st.ok() ? AckStatus::kRead : AckStatus::kReadFailed));
  } else if (e.total > 0) {
    std::memcpy(r->buf(), e.data(), e.total);
  }
  Finish(r, st);
}

void ShmTransport::MatchQueued(Peer& p, TagQueue& q) {
  while (q.recv_head < q.recvs.size() && q.early_head < q.early.size() && q.early[q.early_head]->complete()) {
    BasicRequestPtr r = std::move(q.recvs[q.recv_head++]);
    std::unique_ptr<Early> e = std::move(q.early[q.early_head++]);
    if (!r->Test()) {
      Deliver(p, *e, r);
    } else if (e->rts) {
      SendControl(p, FrameType::kAck, e->cookie, static_cast<uint64_t>(AckStatus::kDiscarded));
    }
  }
  p.tags.RetireIfIdle(q);
}

void ShmTransport::FailGroup(Peer& p, uint64_t group, uint64_t remote_fp) {
  for (auto& q : p.tags.live) {
    if (TagGroup(q->tag) != group) continue;
    for (size_t i = q->recv_head; i < q->recvs.size(); ++i) {
      if (!q->recvs[i]->Test()) Finish(q->recvs[i], GroupMismatch(opts_.rank, p.rank, q->tag), remote_fp);
    }
  }
  for (auto& [cookie, r] : p.streams) {
    if (TagGroup(r->tag()) == group) Finish(r, GroupMismatch(opts_.rank, p.rank, r->tag()), remote_fp);
  }
  if (p.incoming.active && p.incoming.recv && TagGroup(p.incoming.tag) == group) {
    Finish(p.incoming.recv, GroupMismatch(opts_.rank, p.rank, p.incoming.tag), remote_fp);
  }
}

void ShmTransport::Finish(const BasicRequestPtr& req, const Status& st, uint64_t remote_fp) {
  if (req->Complete(st, remote_fp)) {
    --active_;
    completed_ = true;
  }
}

// ---- Failures ----

bool ShmTransport::HasPending(const Peer& p) const {
  if (!p.awaiting_ack.empty() || !p.streams.empty() || p.outq_head < p.outq.size() ||
      (p.incoming.active && p.incoming.recv)) {
    return true;
  }
  for (const auto& q : p.tags.live) {
    for (size_t i = q->recv_head; i < q->recvs.size(); ++i) {
      if (!q->recvs[i]->Test()) return true;
    }
  }
  return false;
}

void ShmTransport::PeerGone(Peer& p, const Status& why) {
  if (!p.gone.ok()) return;
  p.gone = why;
  if (HasPending(p)) AbortLocked(why);
}

Status ShmTransport::PeerStateError(const Peer& p) const {
  if (p.ctl->state.load(std::memory_order_acquire) == static_cast<uint32_t>(PeerState::kAborted)) {
    return PeerFailed(PeerDesc(p.rank) +
                      " aborted: " + std::string(p.ctl->reason, strnlen(p.ctl->reason, sizeof(p.ctl->reason))));
  }
  return PeerFailed(PeerDesc(p.rank) + " closed its communicator while rank " + std::to_string(opts_.rank) +
                    " still exchanged messages with it");
}

void ShmTransport::CheckPeers() {
  for (auto& pp : peers_) {
    if (!pp) continue;
    Peer& p = *pp;
    const uint32_t st = p.ctl->state.load(std::memory_order_acquire);
    if (st == p.seen_state) continue;
    p.seen_state = st;
    if (st == static_cast<uint32_t>(PeerState::kAborted)) return AbortLocked(PeerStateError(p));
    if (st == static_cast<uint32_t>(PeerState::kClosed)) PeerGone(p, PeerStateError(p));
  }
}

void ShmTransport::Abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked(reason);
  }
  Ring(ctl_);
}

void ShmTransport::Announce(PeerState state) {
  ctl_->state.store(static_cast<uint32_t>(state), std::memory_order_seq_cst);
  for (auto& p : peers_) {
    if (!p || p->ctl == nullptr) continue;
    p->ctl->alert.fetch_add(1, std::memory_order_seq_cst);
    Ring(p->ctl);
  }
}

void ShmTransport::AbortIfDeferred() {
  if (!deferred_abort_.ok()) AbortLocked(deferred_abort_);
}

void ShmTransport::AbortLocked(const Status& reason) {
  if (aborted_) return;
  aborted_ = true;
  abort_status_ = reason.ok() ? AbortedError("aborted") : reason;
  aborted_flag_.store(true);
  health_.Set(abort_status_);
  // Tell the peers first: they fail their requests naming this rank and the reason.
  const std::string msg = abort_status_.message();
  const size_t n = std::min(msg.size(), sizeof(ctl_->reason) - 1);
  std::memcpy(ctl_->reason, msg.data(), n);
  ctl_->reason[n] = '\0';
  Announce(PeerState::kAborted);
  // Every request this transport tracks fails; none of their buffers is touched again
  // (everything that touches them holds mu_ and looks at aborted_ first).
  for (BasicRequestPtr& r : deadlines_.TakeAll()) Finish(r, abort_status_);
  for (auto& p : peers_) {
    if (!p) continue;
    p->outq.clear();
    p->outq_head = 0;
    p->out_blocked.store(false);
    p->awaiting_ack.clear();
    p->streams.clear();
    p->incoming = Incoming();
    p->tags.live.clear();
  }
  self_tags_.live.clear();
}

// ---- Progress ----

bool ShmTransport::PollLocked(Clock::time_point now) {
  if (aborted_) return false;
  completed_ = false;
  bool moved = false;
  // A peer's frames precede its change of state: read the state, then drain, then act
  // on the state, so that what it sent before it aborted or closed still lands.
  const uint32_t alert = ctl_->alert.load(std::memory_order_acquire);
  for (auto& p : peers_) {
    if (!p || aborted_) continue;
    moved |= DrainRing(*p);
    if (p->out_blocked.load(std::memory_order_relaxed)) moved |= PushOut(*p);
  }
  if (!aborted_ && alert != seen_alert_.load(std::memory_order_relaxed)) {
    seen_alert_.store(alert, std::memory_order_relaxed);
    CheckPeers();
    moved = true;
  }
  if (!aborted_) {
    if (BasicRequestPtr r = deadlines_.Expired(now)) {
      // A request past its deadline: its buffer could still be read or written by a
      // peer, so the whole transport stops.
      AbortLocked(TimeoutError("rank " + std::to_string(opts_.rank) + ": " + r->Describe() + " with " +
                               PeerDesc(r->peer()) + " did not finish within " + std::to_string(opts_.timeout_ms) +
                               " ms"));
    }
  }
  if (completed_ || aborted_) {
    moved = true;
    Ring(ctl_);  // other threads of this rank may sleep on requests finished here
  }
  return moved;
}

void ShmTransport::Progress() {
  // Single copy leaves nothing to move between waits: a read polled here would be this
  // thread's work anyway, cut into the caller's copy or reduction (slower than after it).
  if (!streams_) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) PollLocked(Clock::now());
}

void ShmTransport::Ring(Control* ctl) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ctl->sleepers.load(std::memory_order_relaxed) == 0) return;
  ctl->doorbell.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&ctl->doorbell);
}

bool ShmTransport::HasWork() {
  if (aborted_flag_.load() || stop_.load()) return true;
  if (ctl_->alert.load(std::memory_order_acquire) != seen_alert_.load(std::memory_order_relaxed)) return true;
  for (auto& p : peers_) {
    if (!p) continue;
    if (p->in->head.load(std::memory_order_acquire) != p->in->tail.load(std::memory_order_relaxed)) return true;
    if (p->out_blocked.load(std::memory_order_acquire) &&
        p->out->tail.load(std::memory_order_acquire) != p->out_tail_seen.load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void ShmTransport::Sleep(Clock::time_point until) {
  const uint32_t v = ctl_->doorbell.load(std::memory_order_acquire);
  ctl_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (!HasWork()) FutexWait(&ctl_->doorbell, v, until);
  ctl_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmTransport::Drive(BasicRequest& req, Deadline deadline) {
  app_drivers_.fetch_add(1);
  auto now = Clock::now();
  auto spin_until = now + std::chrono::microseconds(opts_.spin_us);
  auto housekeeping = now;  // deadlines are looked at under the lock, now and then
  unsigned looks = 0;
  while (!req.Test() && now < deadline.at()) {
    bool moved = false;
    if (HasWork() || now >= housekeeping) {
      std::lock_guard<std::mutex> lock(mu_);
      moved = PollLocked(now);
      housekeeping = now + kHousekeeping;
    }
    if (req.Test()) break;
    // While nothing moves, the clock is read every few looks only: it is a good part of
    // a short call.
    if (moved || (++looks & 7) == 0) now = Clock::now();
    if (moved) spin_until = now + std::chrono::microseconds(opts_.spin_us);
    if (now < spin_until) {
      // The answer to a short message is microseconds away. Where ranks outnumber
      // cores, the peer may need this core to send it.
      if (opts_.crowded) {
        sched_yield();
      } else {
        CpuRelax();
      }
      continue;
    }
    Sleep(std::min(deadline.at(), now + kMaxSleep));
    now = Clock::now();
  }
  last_app_drive_ns_.store(NowNs(now));
  app_drivers_.fetch_sub(1);
}

void ShmTransport::Watch(Peer& p) {
  if (p.watched.load(std::memory_order_relaxed)) return;
  p.watched.store(true, std::memory_order_release);
  watched_.fetch_add(1, std::memory_order_release);
}

void ShmTransport::OpenPidfds() {
  const int asked = watched_.load(std::memory_order_acquire);
  if (asked == pidfds_opened_) return;
  pidfds_opened_ = asked;
  for (auto& pp : peers_) {
    if (!pp || pp->pidfd_opened || !pp->watched.load(std::memory_order_acquire)) continue;
    Peer& p = *pp;
    p.pidfd_opened = true;
    if (p.pid == getpid()) continue;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, p.pid, 0));
    if (fd >= 0) {
      p.pidfd = UniqueFd(fd);
    } else if (errno == ESRCH) {
      OnPeerExit(p);  // gone before it was first watched
    } else {
      CHORUS_WARN("rank " << opts_.rank << ": pidfd_open(" << p.pid << "): " << std::strerror(errno)
                          << ": the death of " << PeerDesc(p.rank) << " is noticed only by deadlines");
    }
  }
}

void ShmTransport::OnPeerExit(Peer& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.pidfd.reset();
    if (!aborted_) {
      // What it sent before it died is good (the poll drains it); then the state it
      // left, or its death.
      PollLocked(Clock::now());
      // A process that died never comes back: the communicator is broken, whether or
      // not something waits for it now (a later call, and the shutdown, must not wait).
      if (!aborted_ && p.ctl->state.load() == static_cast<uint32_t>(PeerState::kRunning)) {
        AbortLocked(PeerFailed(PeerDesc(p.rank) + " on this host exited without closing its communicator"));
      }
    }
  }
  Ring(ctl_);
}

void ShmTransport::CheckPidfds(int timeout_ms) {
  OpenPidfds();
  std::vector<struct pollfd> fds;
  std::vector<Peer*> who;
  for (auto& p : peers_) {
    if (!p || !p->pidfd.valid()) continue;
    fds.push_back({p->pidfd.get(), POLLIN, 0});
    who.push_back(p.get());
  }
  if (fds.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) OnPeerExit(*who[i]);
  }
}

void ShmTransport::CheckStoppedPeers(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  const auto limit = std::chrono::milliseconds(opts_.peer_timeout_ms);
  Clock::time_point posted;
  const bool waiting = deadlines_.OldestPosted(&posted) && now - posted >= limit;
  for (auto& p : peers_) {
    if (!p || p->pid <= 0 || !p->watched.load(std::memory_order_relaxed)) continue;
    if (!ProcessStopped(p->pid)) {
      p->stopped_since = {};
      continue;
    }
    if (p->stopped_since == Clock::time_point{}) p->stopped_since = now;
    if (waiting && now - p->stopped_since >= limit) {
      AbortLocked(PeerFailed(PeerDesc(p->rank) + " on this host is stopped (SIGSTOP, or a debugger holds it): rank " +
                             std::to_string(opts_.rank) + " waited " +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - posted).count()) +
                             " s for it (CHORUS_PEER_TIMEOUT)"));
      return;
    }
  }
}

void ShmTransport::ProxyLoop() {
  // Stopped peers are looked for a few times per peer timeout.
  const auto stopped_every = std::chrono::milliseconds(std::max<int64_t>(100, opts_.peer_timeout_ms / 4));
  auto next_stopped_check = Clock::now() + stopped_every;
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_stopped_check) {
      CheckStoppedPeers(now);
      next_stopped_check = now + stopped_every;
      Ring(ctl_);  // a thread sleeping on a request failed here
    }
    if (app_drivers_.load() > 0) {
      CheckPidfds(20);  // the application threads drive; watch the peers
      continue;
    }
    if (NowNs(now) - last_app_drive_ns_.load() < std::chrono::nanoseconds(kProxyHandBack).count()) {
      CheckPidfds(2);
      continue;
    }
    bool moved;
    {
      std::lock_guard<std::mutex> lock(mu_);
      moved = PollLocked(now);
    }
    CheckPidfds(0);
    if (!moved) Sleep(now + std::chrono::milliseconds(20));
  }
}

}  // namespace chorus::transport
