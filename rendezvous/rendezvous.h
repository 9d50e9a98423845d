// Meeting the other ranks: start or find the store, and connect to it.
//
// env:// and tcp://: rank 0 starts the store on master_port on every interface;
// when that port is already taken, rank 0 assumes an external (standalone) store is
// listening there and joins it as a client, like torch. Every rank then connects to
// master_addr:master_port, retrying until the deadline.
//
// file://: rank 0 starts a store on an ephemeral port and publishes "host:port" in
// the file, written atomically (temporary file + rename). The other ranks poll the
// file until it appears. Staleness: a file left by an earlier run is never trusted
// on its word. Rank 0 deletes it before anything else and replaces it with one that
// carries a fresh random run nonce, which it also stores in its store before
// publishing. A rank accepts a file only when (1) a store answers at its address,
// (2) that store holds the same nonce and world size, and (3) the rank claims its
// rank slot in that store (compare-and-set): an old store that is still alive and
// already saw this rank is rejected. Rejected files are re-read until rank 0
// replaces them or the deadline passes; the error names the file and what was
// wrong with it. The file is left in place at exit (other ranks may still be reading
// it); the next run's rank 0 replaces it.
#pragma once

#include <memory>

#include "common/deadline.h"
#include "common/status.h"
#include "rendezvous/init_method.h"
#include "rendezvous/store.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

namespace chorus::rendezvous {

struct Rendezvous {
  std::unique_ptr<StoreServer> server;  // non-null on the rank that hosts the store
  std::shared_ptr<Store> store;         // a StoreClient, or the application's store
};

Result<Rendezvous> Join(const InitSpec& spec, Deadline deadline);

}  // namespace chorus::rendezvous
