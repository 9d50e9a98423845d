#include "transport/tcp/handshake.h"

#include <optional>
#include <sstream>

#include "transport/tcp/socket_util.h"
#include "transport/tcp/wire.h"

namespace chorus::transport::tcp {
namespace {

std::string Hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// Why a Hello is unacceptable to `self`; none when it is fine.
std::optional<std::string> CheckHello(const Hello& h, const Identity& self,
                                      const std::vector<std::vector<bool>>& have) {
  std::string me = "rank " + std::to_string(self.rank);
  std::string them = "rank " + std::to_string(h.sender);
  if (h.comm_id != self.comm_id) {
    return "communicator mismatch: " + them + " presented comm_id " + Hex(h.comm_id) + ", " + me + " has comm_id " +
           Hex(self.comm_id);
  }
  if (h.world_size != self.size) {
    return "world size mismatch: " + them + " has world size " + std::to_string(h.world_size) + ", " + me +
           " has world size " + std::to_string(self.size);
  }
  if (h.receiver != self.rank) {
    return them + " wanted to reach rank " + std::to_string(h.receiver) + " but reached " + me;
  }
  if (h.sender <= self.rank || h.sender >= self.size) {
    return "unexpected connection from " + them + ": only ranks " + std::to_string(self.rank + 1) + ".." +
           std::to_string(self.size - 1) + " connect to " + me;
  }
  if (h.nsockets != self.nsockets) {
    return "sockets-per-peer mismatch: " + them + " uses " + std::to_string(h.nsockets) + ", " + me + " uses " +
           std::to_string(self.nsockets) + " (CHORUS_NSOCKS_PERPEER must agree)";
  }
  if (h.socket_index < 0 || h.socket_index >= self.nsockets) {
    return them + " sent socket index " + std::to_string(h.socket_index) + " outside 0.." +
           std::to_string(self.nsockets - 1);
  }
  if (have[h.sender][h.socket_index]) {
    return "duplicate connection: " + them + " socket " + std::to_string(h.socket_index) + " is already connected";
  }
  return std::nullopt;
}

}  // namespace

Status ConnectorHandshake(int fd, const Identity& self, int peer, int index, const std::string& peer_desc,
                          Deadline deadline) {
  std::string what = "handshake with " + peer_desc + " (socket " + std::to_string(index) + ")";
  Hello h{self.comm_id, self.rank, peer, self.size, index, self.nsockets};
  uint8_t out[kHelloSize];
  EncodeHello(h, out);
  CHORUS_RETURN_IF_ERROR(SendAll(fd, out, sizeof(out), deadline, what));
  uint8_t in[kReplySize];
  CHORUS_RETURN_IF_ERROR(RecvAll(fd, in, sizeof(in), deadline, what));
  uint32_t reason_len = 0;
  Result<Reply> r = DecodeReply(in, &reason_len);
  if (!r.ok()) return r.status().WithContext(what);
  std::string reason(reason_len, '\0');
  if (reason_len > 0) CHORUS_RETURN_IF_ERROR(RecvAll(fd, reason.data(), reason_len, deadline, what));
  std::string me = "rank " + std::to_string(self.rank);
  if (!r->accept) {
    Status st = r->comm_id != self.comm_id ? MismatchError("") : PeerFailed("");
    return Status(st.code(), me + ": " + peer_desc + " refused the connection: " + reason);
  }
  // The acceptor agreed; check that it is who we meant to reach.
  if (r->comm_id != self.comm_id) {
    return MismatchError(me + ": " + what + ": communicator mismatch: " + me + " has comm_id " + Hex(self.comm_id) +
                         ", the peer has comm_id " + Hex(r->comm_id));
  }
  if (r->acceptor != peer || r->connector != self.rank || r->world_size != self.size || r->nsockets != self.nsockets) {
    return ProtocolError(me + ": " + what + ": peer answered as rank " + std::to_string(r->acceptor) + " of " +
                         std::to_string(r->world_size) + " with " + std::to_string(r->nsockets) + " sockets for rank " +
                         std::to_string(r->connector) + "; expected rank " + std::to_string(peer) + " of " +
                         std::to_string(self.size) + " with " + std::to_string(self.nsockets) + " sockets for " + me);
  }
  return Status::Ok();
}

Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const std::vector<std::vector<bool>>& have,
                                         Deadline deadline) {
  std::string what = "rank " + std::to_string(self.rank) + ": handshake with an incoming connection";
  uint8_t in[kHelloSize];
  CHORUS_RETURN_IF_ERROR(RecvAll(fd, in, sizeof(in), deadline, what));
  Result<Hello> h = DecodeHello(in);
  if (!h.ok()) return h.status().WithContext(what);
  const std::optional<std::string> refused = CheckHello(h.value(), self, have);
  Reply r;
  r.accept = !refused;
  r.comm_id = self.comm_id;
  r.acceptor = self.rank;
  r.connector = h->sender;
  r.world_size = self.size;
  r.nsockets = self.nsockets;
  if (refused) r.reason = refused->substr(0, kMaxReasonLen);
  uint8_t out[kReplySize];
  EncodeReply(r, out);
  std::string msg(reinterpret_cast<char*>(out), sizeof(out));
  msg += r.reason;
  CHORUS_RETURN_IF_ERROR(SendAll(fd, msg.data(), msg.size(), deadline, what));
  if (!r.accept) {
    bool comm = h->comm_id != self.comm_id;
    return Status(comm ? StatusCode::kMismatch : StatusCode::kProtocolError,
                  "rank " + std::to_string(self.rank) + " refused a connection: " + *refused);
  }
  return AcceptedSocket{h->sender, h->socket_index};
}

}  // namespace chorus::transport::tcp
