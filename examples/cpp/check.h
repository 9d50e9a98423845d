// What every example does with a failed call: print it, naming the call and this rank,
// and exit 1. The launcher (chorusrun) then stops the other ranks, so no rank is left
// waiting for a peer that quit.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "chorus/communicator.h"

namespace example {

inline int g_rank = -1;  // set by Connect(), for the messages below

inline void Fail(const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", g_rank, what.c_str());
  std::exit(1);
}

inline void CheckOk(const chorus::Status& status, const char* call) {
  if (!status.ok()) Fail(std::string(call) + " failed: " + status.ToString());
}

// Joins the other ranks the way torchrun/chorusrun tell a program to (env://: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and checks that there are at least `min_ranks`.
inline std::unique_ptr<chorus::Communicator> Connect(int min_ranks) {
  chorus::Result<std::unique_ptr<chorus::Communicator>> comm = chorus::Communicator::Create();
  if (!comm.ok()) Fail("Communicator::Create failed: " + comm.status().ToString());
  g_rank = (*comm)->rank();
  if ((*comm)->size() < min_ranks) {
    Fail("needs at least " + std::to_string(min_ranks) + " ranks, got " + std::to_string((*comm)->size()) +
         " (start it with: chorusrun --nproc-per-node 2 -- PROGRAM)");
  }
  return std::move(comm).value();
}

}  // namespace example

// CHECK_OK(comm->Send(...)): the failed call is named by its own text.
#define CHECK_OK(call) ::example::CheckOk((call), #call)
