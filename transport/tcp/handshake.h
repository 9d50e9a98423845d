// The per-socket handshake (see wire.h): both sides check every field and name both
// sides' values when they disagree; with a job secret both prove they know it, bound
// to (comm_id, sender, receiver, socket index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::transport::tcp {

struct Identity {
  uint64_t comm_id = 0;
  int rank = 0;
  int size = 0;
  int nsockets = 0;
  JobSecret secret;  // empty: no job secret (every peer must have none)
};

// Connector side: introduces itself as socket `index` to `peer`, reads the verdict.
// `peer_desc` ("rank 0 (host h, 1.2.3.4:5)") names the peer in errors.
Status ConnectorHandshake(int fd, const Identity& self, int peer, int index, const std::string& peer_desc,
                          Deadline deadline);

struct AcceptedSocket {
  int peer = -1;
  int index = -1;
};

// Acceptor side: reads a Hello, checks it against `self` and against the sockets already
// accepted (`have[peer][index]`), answers accept or reject, then checks the connector's
// proof of the job secret. A rejected connection gives an error carrying the reason
// (sent to it where it got that far); `remote` ("1.2.3.4:5") names it there.
Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const std::vector<std::vector<bool>>& have,
                                         const std::string& remote, Deadline deadline);

}  // namespace chorus::transport::tcp
