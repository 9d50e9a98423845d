#include "rendezvous/membership.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/env.h"
#include "common/log.h"
#include "rendezvous/net_util.h"

namespace chorus::rendezvous {
namespace {

constexpr const char* kMembers = "chorus/job/members";
constexpr const char* kSize = "chorus/job/size";
constexpr int64_t kRetryMs = 20;

std::string RankKey(int rank) { return "chorus/job/rank/" + std::to_string(rank); }

// The token without its random part, for messages.
std::string Who(const std::string& token) { return token.substr(0, token.rfind(" #")); }

// A key's value once it is set and not "" (released, or about to be set again by the
// process that claimed it first).
Result<std::string> GetSet(Store& store, const std::string& key, Deadline deadline) {
  for (;;) {
    Result<std::string> v = store.Get(key, std::chrono::milliseconds(deadline.RemainingMs()));
    if (!v.ok() || !v.value().empty()) return v;
    if (deadline.expired()) return TimeoutError("'" + key + "' stayed empty (released, not claimed again)");
    std::this_thread::sleep_for(std::chrono::milliseconds(kRetryMs));
  }
}

}  // namespace

const std::string& ProcessToken() {
  static const std::string token = "pid " + std::to_string(getpid()) + " on " + HostName() + " #" + RandomHex();
  return token;
}

void PostAbort(Store& store, const std::string& abort_key, const Status& reason) {
  Result<bool> there = store.Check({abort_key});
  if (!there.ok() || there.value()) return;  // the store is gone, or a reason is there
  // "<code> <message>": the waiting ranks fail with the same code.
  Status st = store.Set(abort_key, std::to_string(static_cast<int>(reason.code())) + " " + reason.message());
  if (!st.ok()) CHORUS_WARN("could not tell the other ranks why set-up failed: " << st.ToString());
}

Result<Membership> Membership::Claim(Store& store, int rank, int size, Deadline deadline, const std::string& me) {
  const std::string where =
      "rank " + std::to_string(rank) + " (" + Who(me) + ") joining a job of " + std::to_string(size) + " ranks";
  // 1. The job: the first member writes its world size and a nonce naming this job.
  Result<int64_t> members = store.Add(kMembers, 1);
  if (!members.ok()) return members.status().WithContext(where);
  std::string value;
  Status st;
  if (members.value() == 1) {
    value = std::to_string(size) + " " + RandomHex() + " set by rank " + std::to_string(rank) + ", " + Who(me);
    st = store.Set(kSize, value);
  } else {
    Result<std::string> job = GetSet(store, kSize, deadline);
    if (job.ok()) value = job.value();
    st = job.status();
  }
  auto leave = [&store] { (void)store.Add(kMembers, -1); };
  if (!st.ok()) {
    leave();
    return st.WithContext(where);
  }
  // "<size> <nonce> set by ..."
  const size_t sp = value.find(' ');
  const size_t sp2 = sp == std::string::npos ? sp : value.find(' ', sp + 1);
  Result<uint64_t> job_size =
      ParseUnsigned("the job's world size in the store (key " + std::string(kSize) + ")", value.substr(0, sp));
  if (sp2 == std::string::npos || !job_size.ok()) {
    leave();
    return ProtocolError(where + ": the store's '" + kSize + "' is not a chorus job record: '" + value.substr(0, 64) +
                         "'");
  }
  Membership m;
  m.rank_ = rank;
  m.token_ = me;
  m.abort_key_ = "chorus/job/abort/" + value.substr(sp + 1, sp2 - sp - 1);
  auto fail = [&](const std::string& reason) {
    PostAbort(store, m.abort_key_, MismatchError(reason));
    leave();
    return MismatchError(reason);
  };
  if (job_size.value() != static_cast<uint64_t>(size)) {
    return fail("world size differs: rank " + std::to_string(rank) + " (" + Who(me) + ") has WORLD_SIZE=" +
                std::to_string(size) + " but the job's is " + value.substr(0, sp) + " (" + value.substr(sp2 + 1) + ")");
  }
  // 2. The rank: the first claimer owns it; a later one must be this very process.
  Result<int64_t> claims = store.Add(RankKey(rank) + "/claims", 1);
  if (!claims.ok()) {
    leave();
    return claims.status().WithContext(where);
  }
  std::string holder;  // "" when the rank is free
  if (claims.value() > 1) {
    Result<std::string> held = store.Get(RankKey(rank), std::chrono::milliseconds(deadline.RemainingMs()));
    if (!held.ok()) {
      leave();
      return held.status().WithContext(where);
    }
    holder = held.value();
  }
  if (holder.empty()) {
    // Ours: the first claim, or a rank given back by a process that left.
    st = store.Set(RankKey(rank), me);
    if (!st.ok()) {
      leave();
      return st.WithContext(where);
    }
  } else if (holder != me) {
    return fail("rank " + std::to_string(rank) + " is started twice: by " + Who(holder) + " and by " + Who(me) +
                " (a duplicate RANK, or a second job on the same store)");
  }
  return m;
}

void Membership::Release(Store& store) const {
  if (rank_ < 0) return;
  Result<std::string> held = store.Get(RankKey(rank_), std::chrono::milliseconds(0));
  if (held.ok() && held.value() == token_) (void)store.Set(RankKey(rank_), "");
  Result<int64_t> left = store.Add(kMembers, -1);
  if (left.ok() && left.value() == 0) (void)store.Set(kSize, "");
}

void Membership::AwaitOthersLeft(Store& store, Deadline deadline) {
  while (!deadline.expired()) {
    Result<int64_t> members = store.Add(kMembers, 0);
    if (!members.ok() || members.value() <= 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(kRetryMs));
  }
}

Status WatchedStore::Aborted() {
  Result<bool> there = inner_->Check({abort_key_});
  if (!there.ok() || !there.value()) return Status::Ok();
  Result<std::string> why = inner_->Get(abort_key_, std::chrono::milliseconds(0));
  if (!why.ok()) return why.status().WithContext("another rank stopped the set-up");
  // "<code> <message>" (PostAbort); anything else is a mismatch worth naming as is.
  const std::string& v = why.value();
  const size_t sp = v.find(' ');
  Result<uint64_t> code = ParseUnsigned("abort code", v.substr(0, sp));
  if (sp == std::string::npos || !code.ok() || code.value() == 0 ||
      code.value() > static_cast<uint64_t>(StatusCode::kInternal)) {
    return MismatchError("another rank stopped the set-up: " + v);
  }
  return Status(static_cast<StatusCode>(code.value()), "another rank stopped the set-up: " + v.substr(sp + 1));
}

// Waits by `wait(slice)` in slices of kAbortPollMs, looking at the abort key between them.
template <typename T, typename Wait>
Result<T> WatchedStore::Watch(std::chrono::milliseconds timeout, Wait wait) {
  const Deadline deadline = Deadline::After(timeout);
  for (;;) {
    Result<T> v = wait(std::chrono::milliseconds(std::min<int64_t>(kAbortPollMs, deadline.RemainingMs())));
    if (v.ok() || v.status().code() != StatusCode::kTimeout || deadline.expired()) return v;
    CHORUS_RETURN_IF_ERROR(Aborted());
  }
}

Result<std::string> WatchedStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return Watch<std::string>(timeout, [&](std::chrono::milliseconds slice) { return inner_->Get(key, slice); });
}

Result<std::vector<std::string>> WatchedStore::MultiGet(const std::vector<std::string>& keys,
                                                        std::chrono::milliseconds timeout) {
  return Watch<std::vector<std::string>>(
      timeout, [&](std::chrono::milliseconds slice) { return inner_->MultiGet(keys, slice); });
}

}  // namespace chorus::rendezvous
