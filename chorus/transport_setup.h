// Picks and connects a communicator's transport. Each rank opens what the
// configuration allows (CHORUS_TRANSPORT: a verbs device for RDMA, a listening socket
// for TCP), the ranks all-gather what they have, and every rank makes the same choice:
// RDMA when every rank has a usable verbs device ("auto" or "rdma"), else TCP ("auto"
// or "tcp"). The choice and its reason are logged and kept for Describe().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algos/cost_model.h"
#include "chorus/config.h"
#include "common/deadline.h"
#include "common/phase_clock.h"
#include "common/status.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace chorus {

struct TransportSetup {
  std::unique_ptr<transport::Transport> transport;
  std::vector<rendezvous::PeerInfo> peers;  // every rank's, by rank
  std::string choice;                       // "rdma: every rank has a verbs device"
  // What carries messages within a host and between hosts (the cost model's links): the
  // same on every rank, whatever its own host has.
  algos::LinkKind intra = algos::LinkKind::kTcp;
  algos::LinkKind inter = algos::LinkKind::kTcp;
};

Result<TransportSetup> SetUpTransport(const Config& config, rendezvous::Store& store, const std::string& prefix,
                                      int rank, int size, uint64_t comm_id, const std::string& master_addr,
                                      Deadline deadline, PhaseClock& phases);

}  // namespace chorus
