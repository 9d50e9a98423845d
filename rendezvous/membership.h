// Who belongs to a job, settled at the store before anything else: a rank started
// twice, a world size that differs between ranks, or a second job on the same store
// (MASTER_ADDR:MASTER_PORT) is named within seconds, on the rank that finds it and, by
// an abort key, on every rank still setting up, instead of as a timeout.
//
// Keys (under chorus/job/):
//   members          counter of processes holding a rank (the first one sets `size`)
//   size             "<world size> <job nonce> <who set it>"; "" once every member left
//   rank/<r>         the token of the process holding rank r; "" once it left
//   rank/<r>/claims  counter: the first claimer owns the rank without asking
//   abort/<nonce>    why set-up failed; WatchedStore's waits end on it
// A process holds its rank until Release (a clean exit), so that a store that outlives
// one job (a standalone store) can serve the next.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "rendezvous/store.h"

namespace chorus::rendezvous {

// This process as other ranks' errors name it ("pid 12 on host #<random>"): the random
// part tells apart processes that share a pid (two network or pid namespaces).
const std::string& ProcessToken();

class Membership {
 public:
  // Claims `rank` of a job of `size` for the process `token` (claiming it again is
  // fine). Errors name the other process or the other world size; the reason is also
  // posted under the job's abort key.
  static Result<Membership> Claim(Store& store, int rank, int size, Deadline deadline,
                                  const std::string& token = ProcessToken());

  // Gives the rank back; the last member to leave frees the job's world size.
  void Release(Store& store) const;

  // For the rank hosting the store, after Release on a failed set-up: waits (until
  // `deadline`) for the other members to leave, so that they read the posted reason
  // before the store goes.
  static void AwaitOthersLeft(Store& store, Deadline deadline);

  // Where a rank that gives up during set-up says why (see WatchedStore).
  const std::string& abort_key() const { return abort_key_; }

 private:
  int rank_ = -1;
  std::string token_;
  std::string abort_key_;
};

// Posts `reason` (its code and message) under `abort_key`; the first reason stays.
void PostAbort(Store& store, const std::string& abort_key, const Status& reason);

// A store whose waits (Get, MultiGet) also end, with the posted reason (its code), once
// the abort key appears, checked every kAbortPollMs while they wait.
class WatchedStore final : public Store {
 public:
  static constexpr int64_t kAbortPollMs = 250;

  WatchedStore(std::shared_ptr<Store> inner, std::string abort_key)
      : inner_(std::move(inner)), abort_key_(std::move(abort_key)) {}

  Status Set(const std::string& key, std::string value) override { return inner_->Set(key, std::move(value)); }
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return inner_->Add(key, delta); }
  Result<bool> Check(const std::vector<std::string>& keys) override { return inner_->Check(keys); }

  // The posted reason as an error, or OK while there is none.
  Status Aborted();

 private:
  template <typename T, typename Wait>
  Result<T> Watch(std::chrono::milliseconds timeout, Wait wait);

  std::shared_ptr<Store> inner_;
  std::string abort_key_;
};

}  // namespace chorus::rendezvous
