#include "rendezvous/store_client.h"

#include <algorithm>
#include <thread>

#include "common/log.h"

namespace chorus::rendezvous {
namespace {

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

// Store timeouts travel as int64 milliseconds; negative means "do not wait".
int64_t TimeoutMs(std::chrono::milliseconds t) { return std::max<int64_t>(t.count(), 0); }

}  // namespace

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& host, uint16_t port, Deadline deadline,
                                                          const JobSecret& secret) {
  const std::string address = JoinHostPort(host, port);
  if (host.empty()) return InvalidArgument("store address has no host (port " + std::to_string(port) + ")");
  if (port == 0) return InvalidArgument("store address " + address + " has port 0");
  const auto start = Clock::now();
  Status last;
  int attempts = 0;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    ++attempts;
    // Resolution is retried too: on clusters the master's name may appear late in DNS.
    Result<std::vector<SocketAddress>> addrs = Resolve(host, port, SOCK_STREAM, false);
    if (addrs.ok()) {
      // One attempt may not use the whole deadline: a SYN lost to a not-yet-up host
      // would otherwise wait out the kernel's long retransmission schedule.
      Result<UniqueFd> fd = ConnectOnce(addrs.value(), deadline.Earlier(Deadline::AfterMs(5000)));
      if (fd.ok()) {
        std::unique_ptr<StoreClient> client(new StoreClient(std::move(fd.value()), address));
        Status auth = client->Authenticate(secret, deadline.Earlier(Deadline::AfterMs(30 * 1000)));
        if (!auth.ok()) {
          if (auth.code() == StatusCode::kMismatch) return auth;
          return Status(auth.code(), "connected to " + address +
                                         " but it did not authenticate as a store (is a chorus store of this "
                                         "version listening there?): " +
                                         auth.message());
        }
        CHORUS_TRACE("connected to store " << address << " after " << attempts << " attempt(s)");
        return client;
      }
      last = fd.status();
    } else {
      last = addrs.status();
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min(backoff, std::chrono::milliseconds(deadline.RemainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return TimeoutError("could not connect to the store at " + address + " within " + FormatDuration(ElapsedMs(start)) +
                      " (" + std::to_string(attempts) + " attempts; last error: " + last.message() + ")");
}

Status StoreClient::ReadFrame(uint32_t max_length, Deadline deadline, uint8_t* opcode, std::string* payload) {
  const std::string peer = "store " + address_;
  for (;;) {
    FrameParse fp = ParseFrame(inbuf_, max_length);
    if (fp.state == FrameState::kInvalid) return fp.error.WithContext("from " + peer);
    if (fp.state == FrameState::kComplete) {
      *opcode = fp.frame.opcode;
      payload->assign(fp.frame.payload);
      inbuf_.erase(0, fp.frame.total_bytes);
      return Status::Ok();
    }
    CHORUS_RETURN_IF_ERROR(RecvSome(fd_.get(), &inbuf_, deadline, peer));
  }
}

Status StoreClient::Authenticate(const JobSecret& secret, Deadline deadline) {
  const std::string peer = "the store at " + address_;
  uint8_t opcode = 0;
  std::string payload;
  // An ERROR frame can stand where the challenge should (a store of another version).
  CHORUS_RETURN_IF_ERROR(ReadFrame(kMaxAuthReplyLength, deadline, &opcode, &payload));
  Result<AuthChallenge> challenge = DecodeAuthChallenge(opcode, payload);
  if (!challenge.ok()) return challenge.status().WithContext(peer);
  Result<Nonce> nonce = NewNonce();
  if (!nonce.ok()) return nonce.status();
  AuthProof proof;
  proof.has_secret = !secret.empty();
  proof.client_nonce = nonce.value();
  // The MAC goes only to a store that asks for one: a store without a secret gets zeros.
  if (proof.has_secret && challenge->secret)
    proof.mac = StoreClientMac(secret, challenge->server_nonce, proof.client_nonce);
  // Sent even when the secrets' presence differs, so that the server logs why it was refused.
  Status sent = SendAll(fd_.get(), EncodeAuthProof(proof), deadline, peer);
  if (challenge->secret && secret.empty()) {
    return MismatchError(peer +
                         " requires a job secret and this process has none (set CHORUS_SECRET or "
                         "CHORUS_SECRET_FILE as for the rank that hosts the store; chorusrun sets it for its ranks)");
  }
  if (!challenge->secret && !secret.empty()) {
    return MismatchError("this process has a job secret but " + peer +
                         " does not (set CHORUS_SECRET or CHORUS_SECRET_FILE on every rank, or on none)");
  }
  CHORUS_RETURN_IF_ERROR(sent);
  CHORUS_RETURN_IF_ERROR(ReadFrame(kMaxAuthReplyLength, deadline, &opcode, &payload));
  Result<Sha256Digest> answer = DecodeAuthAnswer(opcode, payload);
  if (!answer.ok()) {
    if (answer.status().code() == StatusCode::kMismatch) {
      return MismatchError(peer + " refused this process: " + answer.status().message());
    }
    return answer.status().WithContext(peer);
  }
  if (!secret.empty()) {
    const Sha256Digest want = StoreServerMac(secret, challenge->server_nonce, proof.client_nonce);
    if (!ConstantTimeEqual(answer->data(), want.data(), want.size())) {
      return MismatchError(peer + " did not prove the job secret: it is not this job's store");
    }
  }
  return Status::Ok();
}

void StoreClient::set_io_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  io_timeout_ = timeout;
}

Result<StoreReply> StoreClient::Call(const StoreRequest& request, std::chrono::milliseconds server_wait) {
  std::lock_guard<std::mutex> lock(mu_);
  return CallLocked(request, Deadline::After(std::max(server_wait, std::chrono::milliseconds(0)) + io_timeout_));
}

Result<StoreReply> StoreClient::CallLocked(const StoreRequest& request, Deadline deadline) {
  if (!broken_.ok()) {
    return Status(broken_.code(), "connection to the store at " + address_ + " is unusable: " + broken_.message());
  }
  const std::string frame = EncodeRequest(request);
  if (frame.size() - 4 > kMaxStoreFrameBytes) {
    // Not sent: the connection stays usable.
    return InvalidArgument(std::string(StoreOpName(request.op)) + " request of " + std::to_string(frame.size()) +
                           " bytes exceeds the store's 64 MiB frame limit" +
                           (request.keys.empty() ? std::string() : " (key '" + request.keys[0] + "')"));
  }
  const std::string peer = "store " + address_;
  auto fail = [this](const Status& st) -> Status {
    broken_ = st;
    fd_.reset();
    return st;
  };
  Status st = SendAll(fd_.get(), frame, deadline, peer);
  if (!st.ok()) return fail(st);
  for (;;) {
    FrameParse fp = ParseFrame(inbuf_);
    if (fp.state == FrameState::kInvalid) return fail(fp.error.WithContext("reply from " + peer));
    if (fp.state == FrameState::kComplete) {
      Result<StoreReply> reply = DecodeReply(request.op, fp.frame.opcode, fp.frame.payload);
      inbuf_.erase(0, fp.frame.total_bytes);
      if (!reply.ok()) return fail(reply.status().WithContext("reply from " + peer));
      if (reply.value().code == ReplyCode::kError) {
        // A refused request (ADD on a non-integer). Protocol errors, after which the
        // server hangs up, cannot come from this client's well-formed frames; if one
        // did, the next call sees the closed connection.
        return Status(StatusCode::kInvalidArgument, peer + ": " + reply.value().message);
      }
      if (reply.value().code == ReplyCode::kTimeout) {
        return TimeoutError(std::string(StoreOpName(request.op)) + " on " + peer + ": " + reply.value().message);
      }
      return reply;
    }
    st = RecvSome(fd_.get(), &inbuf_, deadline, peer);
    if (!st.ok()) {
      if (st.code() == StatusCode::kTimeout) {
        st = TimeoutError(std::string(StoreOpName(request.op)) + ": " + peer + " did not answer in time (" +
                          st.message() + ")");
      }
      return fail(st);
    }
  }
}

Status StoreClient::Set(const std::string& key, std::string value) {
  StoreRequest r;
  r.op = StoreOp::kSet;
  r.keys = {key};
  r.value = std::move(value);
  return Call(r, std::chrono::milliseconds(0)).status();
}

Result<std::string> StoreClient::Get(const std::string& key, std::chrono::milliseconds timeout) {
  StoreRequest r;
  r.op = StoreOp::kGet;
  r.keys = {key};
  r.number = TimeoutMs(timeout);
  Result<StoreReply> reply = Call(r, timeout);
  if (!reply.ok()) return reply.status();
  return std::move(reply.value().values[0]);
}

Status StoreClient::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  StoreRequest r;
  r.op = StoreOp::kWait;
  r.keys = keys;
  r.number = TimeoutMs(timeout);
  return Call(r, timeout).status();
}

Result<std::vector<std::string>> StoreClient::MultiGet(const std::vector<std::string>& keys,
                                                       std::chrono::milliseconds timeout) {
  StoreRequest r;
  r.op = StoreOp::kMultiGet;
  r.keys = keys;
  r.number = TimeoutMs(timeout);
  Result<StoreReply> reply = Call(r, timeout);
  if (!reply.ok()) return reply.status();
  if (reply.value().values.size() != keys.size()) {
    return ProtocolError("store " + address_ + " answered MULTI_GET of " + std::to_string(keys.size()) + " keys with " +
                         std::to_string(reply.value().values.size()) + " values");
  }
  return std::move(reply.value().values);
}

Result<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  StoreRequest r;
  r.op = StoreOp::kAdd;
  r.keys = {key};
  r.number = delta;
  Result<StoreReply> reply = Call(r, std::chrono::milliseconds(0));
  if (!reply.ok()) return reply.status();
  return reply.value().number;
}

Result<std::string> StoreClient::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired) {
  StoreRequest r;
  r.op = StoreOp::kCompareSet;
  r.keys = {key};
  r.expected = expected;
  r.value = desired;
  Result<StoreReply> reply = Call(r, std::chrono::milliseconds(0));
  if (!reply.ok()) return reply.status();
  return std::move(reply.value().values[0]);
}

Result<bool> StoreClient::Delete(const std::string& key) {
  StoreRequest r;
  r.op = StoreOp::kDelete;
  r.keys = {key};
  Result<StoreReply> reply = Call(r, std::chrono::milliseconds(0));
  if (!reply.ok()) return reply.status();
  return reply.value().number != 0;
}

Result<bool> StoreClient::Check(const std::vector<std::string>& keys) {
  StoreRequest r;
  r.op = StoreOp::kCheck;
  r.keys = keys;
  Result<StoreReply> reply = Call(r, std::chrono::milliseconds(0));
  if (!reply.ok()) return reply.status();
  return reply.value().number != 0;
}

Status StoreClient::Ping() {
  StoreRequest r;
  return Call(r, std::chrono::milliseconds(0)).status();
}

}  // namespace chorus::rendezvous
