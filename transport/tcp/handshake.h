// The per-socket handshake (see wire.h): both sides check every field and name both
// sides' values when they disagree; with a job secret both prove they know it, bound
// to (comm_id, sender, receiver, socket index).
#pragma once

#include <cstdint>
#include <functional>
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
  JobSecret secret;   // empty: no job secret (every peer must have none)
  bool lazy = false;  // CHORUS_TCP_CONNECT=lazy: either rank of a pair may dial (every rank must agree)
};

// Connector side: introduces itself as socket `index` to `peer`, reads the verdict.
// `peer_desc` ("rank 0 (host h, 1.2.3.4:5)") names the peer in errors. A "crossed"
// verdict (lazy mode only) sets *crossed and returns Ok: the socket carries nothing.
// A rejection because the peer aborted sets *peer_aborted.
Status ConnectorHandshake(int fd, const Identity& self, int peer, int index, const std::string& peer_desc,
                          Deadline deadline, bool* crossed = nullptr, bool* peer_aborted = nullptr);

// An incoming connection must finish its handshake within this: a stranger that
// connects and stays silent holds the (one-at-a-time) acceptor up no longer.
constexpr int64_t kAcceptHandshakeMs = 10 * 1000;

struct AcceptedSocket {
  int peer = -1;
  int index = -1;
  bool crossed = false;  // answered "crossed": not a socket of the mesh
};

// Lazy mode: the acceptor's answer to a well-formed Hello from `peer` for socket
// `index`, given what this rank has dialed and accepted already.
// kAborted: refused because this rank's communicator aborted.
enum class Admit { kAccept, kCrossed, kRefuse, kAborted };
struct Admission {
  Admit verdict = Admit::kRefuse;
  std::string reason;  // kRefuse, kAborted: why
};
using AdmitFn = std::function<Admission(int peer, int index)>;

// As below, with `admit` deciding instead of the slots already taken.
Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const AdmitFn& admit, const std::string& remote,
                                         Deadline deadline);

// Acceptor side: reads a Hello, checks it against `self` and against the sockets already
// accepted (`have[peer][index]`), answers accept or reject, then checks the connector's
// proof of the job secret. A rejected connection gives an error carrying the reason
// (sent to it where it got that far); `remote` ("1.2.3.4:5") names it there.
Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const std::vector<std::vector<bool>>& have,
                                         const std::string& remote, Deadline deadline);

}  // namespace chorus::transport::tcp
