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
std::optional<std::string> CheckHello(const Hello& h, const Identity& self) {
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
  if (h.lazy != self.lazy) {
    return std::string("connect mode mismatch: ") + them + " connects " + (h.lazy ? "lazily" : "eagerly") + ", " + me +
           " " + (self.lazy ? "lazily" : "eagerly") + " (CHORUS_TCP_CONNECT must agree)";
  }
  if (self.lazy && (h.sender < 0 || h.sender >= self.size || h.sender == self.rank)) {
    return "unexpected connection from " + them + ": not a peer of " + me + " in a world of size " +
           std::to_string(self.size);
  }
  if (!self.lazy && (h.sender <= self.rank || h.sender >= self.size)) {
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
  if (!self.secret.empty() && !h.has_secret) {
    return me + " requires a job secret; " + them +
           " has none (set CHORUS_SECRET or CHORUS_SECRET_FILE on every rank, or on none)";
  }
  if (self.secret.empty() && h.has_secret) {
    return them + " has a job secret but " + me +
           " does not (set CHORUS_SECRET or CHORUS_SECRET_FILE on every rank, or on none)";
  }
  return std::nullopt;
}

std::string_view Bytes(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

constexpr const char* kAcceptorLabel = "chorus-tcp-acceptor";
constexpr const char* kConnectorLabel = "chorus-tcp-connector";

}  // namespace

Status ConnectorHandshake(int fd, const Identity& self, int peer, int index, const std::string& peer_desc,
                          Deadline deadline, bool* crossed, bool* peer_aborted) {
  std::string what = "handshake with " + peer_desc + " (socket " + std::to_string(index) + ")";
  Hello h{self.comm_id, self.rank, peer, self.size, index, self.nsockets, !self.secret.empty(), self.lazy, {}};
  if (h.has_secret) {
    Result<Nonce> nonce = NewNonce();
    if (!nonce.ok()) return nonce.status().WithContext(what);
    h.nonce = nonce.value();
  }
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
  if (r->crossed) {
    if (crossed == nullptr || !self.lazy || r->acceptor != peer) {
      return ProtocolError(me + ": " + what + ": unexpected \"crossed\" verdict");
    }
    *crossed = true;
    return Status::Ok();
  }
  if (!r->accept) {
    if (peer_aborted != nullptr) *peer_aborted = r->aborted;
    const bool mismatch = r->comm_id != self.comm_id || r->has_secret != h.has_secret;
    Status st = mismatch ? MismatchError("") : PeerFailed("");
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
  if (r->has_secret != h.has_secret) {
    return MismatchError(me + ": " + what + ": " + (h.has_secret ? me : peer_desc) + " has a job secret but " +
                         (h.has_secret ? peer_desc : me) + " does not");
  }
  if (!h.has_secret) return Status::Ok();
  const std::string_view hello = Bytes(out, sizeof(out));
  if (!self.secret.Verify(r->mac.data(), kAcceptorLabel, {hello, View(r->nonce)})) {
    return MismatchError(me + ": " + what +
                         ": the peer did not prove the job secret (its CHORUS_SECRET differs, or "
                         "another job's process listens at that address)");
  }
  const Sha256Digest proof = self.secret.Mac(kConnectorLabel, {hello, View(r->nonce)});
  return SendAll(fd, proof.data(), proof.size(), deadline, what);
}

Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const std::vector<std::vector<bool>>& have,
                                         const std::string& remote, Deadline deadline) {
  const AdmitFn admit = [&](int peer, int index) {
    if (!have[peer][index]) return Admission{Admit::kAccept, {}};
    return Admission{Admit::kRefuse, "duplicate connection: rank " + std::to_string(peer) + " socket " +
                                         std::to_string(index) + " is already connected"};
  };
  return AcceptorHandshake(fd, self, admit, remote, deadline);
}

Result<AcceptedSocket> AcceptorHandshake(int fd, const Identity& self, const AdmitFn& admit, const std::string& remote,
                                         Deadline deadline) {
  const std::string me = "rank " + std::to_string(self.rank);
  std::string what = me + ": handshake with an incoming connection from " + remote;
  uint8_t in[kHelloSize];
  CHORUS_RETURN_IF_ERROR(RecvAll(fd, in, sizeof(in), deadline, what));
  Result<Hello> h = DecodeHello(in);
  if (!h.ok()) return h.status().WithContext(what);
  std::optional<std::string> refused = CheckHello(h.value(), self);
  Admission admission;
  if (!refused) {
    admission = admit(h->sender, h->socket_index);
    if (admission.verdict == Admit::kRefuse || admission.verdict == Admit::kAborted) refused = admission.reason;
  }
  Reply r;
  r.accept = !refused && admission.verdict == Admit::kAccept;
  r.crossed = !refused && admission.verdict == Admit::kCrossed;
  r.aborted = admission.verdict == Admit::kAborted;
  r.comm_id = self.comm_id;
  r.acceptor = self.rank;
  r.connector = h->sender;
  r.world_size = self.size;
  r.nsockets = self.nsockets;
  r.has_secret = !self.secret.empty();
  const bool prove = r.accept && r.has_secret;
  const std::string_view hello = Bytes(in, sizeof(in));
  if (prove) {
    Result<Nonce> nonce = NewNonce();
    if (!nonce.ok()) return nonce.status().WithContext(what);
    r.nonce = nonce.value();
    r.mac = self.secret.Mac(kAcceptorLabel, {hello, View(r.nonce)});
  }
  if (refused) r.reason = refused->substr(0, kMaxReasonLen);
  uint8_t out[kReplySize];
  EncodeReply(r, out);
  std::string msg(reinterpret_cast<char*>(out), sizeof(out));
  msg += r.reason;
  CHORUS_RETURN_IF_ERROR(SendAll(fd, msg.data(), msg.size(), deadline, what));
  if (r.crossed) return AcceptedSocket{h->sender, h->socket_index, true};
  if (!r.accept) {
    const bool mismatch = h->comm_id != self.comm_id || h->has_secret != r.has_secret;
    return Status(mismatch ? StatusCode::kMismatch : StatusCode::kProtocolError,
                  me + " refused a connection from " + remote + ": " + *refused);
  }
  if (prove) {
    uint8_t proof[kProofSize];
    const std::string claimed = "rank " + std::to_string(h->sender) + " socket " + std::to_string(h->socket_index);
    Status st = RecvAll(fd, proof, sizeof(proof), deadline, what);
    if (!st.ok() || !self.secret.Verify(proof, kConnectorLabel, {hello, View(r.nonce)})) {
      return MismatchError(me + " dropped a connection from " + remote + " claiming to be " + claimed +
                           ": it did not prove the job secret" + (st.ok() ? "" : " (" + st.message() + ")"));
    }
  }
  return AcceptedSocket{h->sender, h->socket_index, false};
}

}  // namespace chorus::transport::tcp
