// The store against a live server on loopback: every op, parked waits, timeouts that
// name keys, concurrency, malformed frames (the server must keep serving), dead servers,
// the job secret's challenge-response.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "rendezvous/socket_io.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_server.h"
#include "tests/util/slowdown.h"

namespace chorus::rendezvous {
namespace {

using std::chrono::milliseconds;

int64_t MsSince(Clock::time_point t) { return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count(); }

std::unique_ptr<StoreServer> StartServer() {
  auto server = StoreServer::Start("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(server.value());
}

std::unique_ptr<StoreClient> ConnectTo(uint16_t port) {
  auto client = StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(5000));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return std::move(client.value());
}

// A raw blocking socket with a receive timeout, for speaking garbage to the server.
class RawConn {
 public:
  explicit RawConn(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{5, 0};
    setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  void ShutdownWrite() { shutdown(fd_.get(), SHUT_WR); }
  // One whole frame (at most 5 s of waiting); kIncomplete when the server closed first.
  FrameParse ReadFrame() {
    for (;;) {
      FrameParse fp = ParseFrame(in_);
      if (fp.state != FrameState::kIncomplete) {
        last_ = in_.substr(0, fp.frame.total_bytes);
        in_.erase(0, fp.frame.total_bytes);
        fp = ParseFrame(last_);
        return fp;
      }
      char buf[4096];
      ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return fp;
      in_.append(buf, n);
    }
  }
  // Reads the challenge and answers as a client without a secret, as a store client does.
  void Authenticate() {
    FrameParse challenge = ReadFrame();
    ASSERT_EQ(challenge.state, FrameState::kComplete);
    ASSERT_TRUE(DecodeAuthChallenge(challenge.frame.opcode, challenge.frame.payload).ok());
    Send(EncodeAuthProof(AuthProof{}));
    FrameParse answer = ReadFrame();
    ASSERT_EQ(answer.state, FrameState::kComplete);
    ASSERT_TRUE(DecodeAuthAnswer(answer.frame.opcode, answer.frame.payload).ok());
  }
  // Everything until the server closes (or 5 s pass: then `closed` is false).
  std::string ReadUntilClose(bool* closed) {
    std::string all = std::move(in_);
    in_.clear();
    char buf[4096];
    for (;;) {
      ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        all.append(buf, n);
        continue;
      }
      *closed = (n == 0 || errno == ECONNRESET);
      return all;
    }
  }

 private:
  UniqueFd fd_;
  std::string in_;    // received, not yet returned
  std::string last_;  // the frame ReadFrame returned a view of
};

std::string Le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// Sends `bytes`, expects an ERROR reply mentioning `needle` and a closed connection.
// `authenticate`: as a client without a secret first; else the bytes stand for the proof.
void ExpectErrorAndClose(uint16_t port, const std::string& bytes, const std::string& needle, bool shut_write = false,
                         bool authenticate = true) {
  RawConn raw(port);
  if (authenticate) {
    raw.Authenticate();
  } else {
    ASSERT_EQ(raw.ReadFrame().state, FrameState::kComplete);  // the challenge
  }
  raw.Send(bytes);
  if (shut_write) raw.ShutdownWrite();
  bool closed = false;
  std::string reply = raw.ReadUntilClose(&closed);
  EXPECT_TRUE(closed) << "the server did not close the connection";
  FrameParse fp = ParseFrame(reply);
  ASSERT_EQ(fp.state, FrameState::kComplete) << "no error reply for " << needle;
  Result<StoreReply> r = DecodeReply(StoreOp::kPing, fp.frame.opcode, fp.frame.payload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().code, ReplyCode::kError);
  EXPECT_NE(r.value().message.find(needle), std::string::npos) << r.value().message;
}

TEST(Store, SetGetCheckDelete) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  ASSERT_TRUE(c->Set("a", "1").ok());
  ASSERT_TRUE(c->Set("bin", std::string("\0\xff", 2)).ok());
  EXPECT_EQ(c->Get("a", milliseconds(100)).value(), "1");
  EXPECT_EQ(c->Get("bin", milliseconds(100)).value(), std::string("\0\xff", 2));
  EXPECT_TRUE(c->Check({"a", "bin"}).value());
  EXPECT_FALSE(c->Check({"a", "nope"}).value());
  EXPECT_TRUE(c->Check({}).value());
  ASSERT_TRUE(c->Set("a", "2").ok());  // overwrite
  EXPECT_EQ(c->Get("a", milliseconds(100)).value(), "2");
  EXPECT_TRUE(c->Delete("a").value());
  EXPECT_FALSE(c->Delete("a").value());
  EXPECT_FALSE(c->Check({"a"}).value());
  EXPECT_TRUE(c->Ping().ok());
  auto all = c->MultiGet({"bin"}, milliseconds(10));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value().size(), 1u);
}

TEST(Store, LargeValueRoundTrips) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  std::string big(8 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  ASSERT_TRUE(c->Set("big", big).ok());
  EXPECT_EQ(c->Get("big", milliseconds(1000)).value(), big);
}

TEST(Store, ValueOverTheFrameLimitIsRefusedAndTheClientStaysUsable) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  Status st = c->Set("huge", std::string(kMaxStoreFrameBytes, 'x'));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'huge'"), std::string::npos) << st.message();
  EXPECT_TRUE(c->Ping().ok());
}

TEST(Store, AddIsAtomicAcrossConcurrentClients) {
  auto server = StartServer();
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto c = ConnectTo(server->port());
      for (int i = 0; i < kAdds; ++i) {
        if (!c->Add("counter", 1).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = ConnectTo(server->port());
  EXPECT_EQ(c->Add("counter", 0).value(), kThreads * kAdds);
  EXPECT_EQ(c->Add("counter", -5).value(), kThreads * kAdds - 5);
}

TEST(Store, OneClientSharedByThreads) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        ASSERT_TRUE(c->Set("k" + std::to_string(t), std::to_string(i)).ok());
        ASSERT_EQ(c->Get("k" + std::to_string(t), milliseconds(100)).value(), std::to_string(i));
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Store, AddErrorsOnNonIntegerAndOverflowWithoutBreakingTheConnection) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  ASSERT_TRUE(c->Set("text", "abc").ok());
  auto r = c->Add("text", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not an integer"), std::string::npos) << r.status().message();
  ASSERT_TRUE(c->Add("big", INT64_MAX).ok());
  r = c->Add("big", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflow"), std::string::npos);
  EXPECT_TRUE(c->Ping().ok());
}

TEST(Store, CompareSet) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  // Absent counts as "": expected "" creates the key.
  EXPECT_EQ(c->CompareSet("k", "", "first").value(), "first");
  EXPECT_EQ(c->CompareSet("k", "", "second").value(), "first");  // no swap
  EXPECT_EQ(c->CompareSet("k", "wrong", "x").value(), "first");
  EXPECT_EQ(c->CompareSet("k", "first", "third").value(), "third");
  EXPECT_EQ(c->Get("k", milliseconds(10)).value(), "third");
  // Absent with a non-empty expectation: nothing happens.
  EXPECT_EQ(c->CompareSet("absent", "x", "y").value(), "");
  EXPECT_FALSE(c->Check({"absent"}).value());
}

TEST(Store, GetWaitsForALaterSet) {
  auto server = StartServer();
  auto waiter = ConnectTo(server->port());
  auto setter = ConnectTo(server->port());
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(setter->Set("late", "here").ok());
  });
  auto start = Clock::now();
  auto v = waiter->Get("late", milliseconds(5000));
  t.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v.value(), "here");
  EXPECT_LT(MsSince(start), 3000);
}

TEST(Store, WaitAndMultiGetReturnWhenAllKeysExist) {
  auto server = StartServer();
  auto waiter = ConnectTo(server->port());
  auto setter = ConnectTo(server->port());
  std::thread t([&] {
    for (const char* k : {"x", "y", "z"}) {
      std::this_thread::sleep_for(milliseconds(30));
      ASSERT_TRUE(setter->Set(k, std::string(k) + "!").ok());
    }
  });
  auto all = waiter->MultiGet({"x", "y", "z", "x"}, milliseconds(5000));
  t.join();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all.value(), (std::vector<std::string>{"x!", "y!", "z!", "x!"}));
  EXPECT_TRUE(waiter->Wait({"x", "z"}, milliseconds(10)).ok());
}

TEST(Store, AddAndCompareSetWakeWaiters) {
  auto server = StartServer();
  auto waiter = ConnectTo(server->port());
  auto other = ConnectTo(server->port());
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(other->Add("n", 3).ok());
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(other->CompareSet("c", "", "v").ok());
  });
  EXPECT_TRUE(waiter->Wait({"n", "c"}, milliseconds(5000)).ok());
  t.join();
}

TEST(Store, WaitTimesOutNamingTheMissingKeys) {
  auto server = StartServer();
  auto c = ConnectTo(server->port());
  ASSERT_TRUE(c->Set("present", "1").ok());
  auto start = Clock::now();
  Status st = c->Wait({"present", "missing-1", "missing-2"}, milliseconds(200));
  int64_t took = MsSince(start);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("'missing-1'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'missing-2'"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("'present'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("2 of 3"), std::string::npos) << st.message();
  EXPECT_GE(took, 190);
  EXPECT_LT(took, 3000);

  auto v = c->Get("nope", milliseconds(100));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("'nope'"), std::string::npos) << v.status().message();
  EXPECT_NE(v.status().message().find("127.0.0.1:"), std::string::npos) << v.status().message();
  // A zero timeout checks without waiting.
  EXPECT_EQ(c->Get("nope", milliseconds(0)).status().code(), StatusCode::kTimeout);
  // The connection survives timeouts.
  EXPECT_EQ(c->Get("present", milliseconds(0)).value(), "1");
}

TEST(Store, ParkedWaitersDoNotBlockOtherClients) {
  auto server = StartServer();
  std::vector<std::thread> waiters;
  std::atomic<int> woke{0};
  for (int i = 0; i < 16; ++i) {
    waiters.emplace_back([&] {
      auto c = ConnectTo(server->port());
      if (c->Get("go", milliseconds(10000)).ok()) ++woke;
    });
  }
  auto c = ConnectTo(server->port());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Add("busy", 1).ok());
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(c->Set("go", "1").ok());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 16);
}

TEST(Store, DeletedKeyIsWaitedForAgain) {
  auto server = StartServer();
  auto waiter = ConnectTo(server->port());
  auto other = ConnectTo(server->port());
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(other->Set("a", "1").ok());
    ASSERT_TRUE(other->Delete("a").ok());
    ASSERT_TRUE(other->Set("b", "1").ok());  // "a" is gone again: still not complete
  });
  Status st = waiter->Wait({"a", "b"}, milliseconds(400));
  t.join();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'a'"), std::string::npos) << st.message();
}

TEST(Store, MalformedFramesGetAnErrorAndAreDisconnectedWhileOthersAreServed) {
  auto server = StartServer();
  auto good = ConnectTo(server->port());
  ASSERT_TRUE(good->Set("k", "v").ok());

  ExpectErrorAndClose(server->port(), Le32(kMaxStoreFrameBytes + 1) + "\x01\x01", "64 MiB");
  ExpectErrorAndClose(server->port(), Le32(0xffffffffu), "exceeds");
  ExpectErrorAndClose(server->port(), Le32(1) + "\x01", "shorter");
  ExpectErrorAndClose(server->port(), Le32(2) + std::string("\x09\x08", 2), "version 9");
  ExpectErrorAndClose(server->port(), EncodeFrame(77, "abc"), "unknown opcode 77");
  ExpectErrorAndClose(server->port(), EncodeFrame(0, ""), "unknown opcode 0");
  // SET whose key length points past the payload.
  ExpectErrorAndClose(server->port(), EncodeFrame(1, Le32(1000) + "abc"), "malformed SET");
  // PING with a payload.
  ExpectErrorAndClose(server->port(), EncodeFrame(8, "junk"), "trailing");
  // WAIT claiming 2^32-1 keys.
  ExpectErrorAndClose(server->port(), EncodeFrame(3, Le32(0xffffffffu) + std::string(8, '\0')), "malformed WAIT");
  // Truncated frame, then the client closes its side.
  ExpectErrorAndClose(server->port(), EncodeFrame(1, std::string(100, 'x')).substr(0, 50), "middle of a frame",
                      /*shut_write=*/true);
  // Valid frames before a bad one are served; the error follows their replies.
  {
    RawConn raw(server->port());
    raw.Authenticate();
    raw.Send(EncodeRequest({StoreOp::kPing, {}, "", "", 0}) + EncodeFrame(99, ""));
    bool closed = false;
    std::string bytes = raw.ReadUntilClose(&closed);
    EXPECT_TRUE(closed);
    FrameParse first = ParseFrame(bytes);
    ASSERT_EQ(first.state, FrameState::kComplete);
    EXPECT_EQ(DecodeReply(StoreOp::kPing, first.frame.opcode, first.frame.payload).value().code, ReplyCode::kOk);
    FrameParse second = ParseFrame(std::string_view(bytes).substr(first.frame.total_bytes));
    ASSERT_EQ(second.state, FrameState::kComplete);
    EXPECT_EQ(DecodeReply(StoreOp::kPing, second.frame.opcode, second.frame.payload).value().code, ReplyCode::kError);
  }
  // Random garbage from several connections at once, before authenticating: the
  // server reads no more than the proof's size of it.
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 8; ++i) {
      ts.emplace_back([&, i] {
        RawConn raw(server->port());
        std::string junk;
        uint32_t seed = 77 + i;
        for (int j = 0; j < 3000; ++j) junk.push_back(static_cast<char>((seed = seed * 1103515245 + 12345) >> 16));
        raw.Send(junk);
        raw.ShutdownWrite();
        bool closed = false;
        raw.ReadUntilClose(&closed);
        EXPECT_TRUE(closed);
      });
    }
    for (auto& t : ts) t.join();
  }
  // The well-behaved client and new clients are still served.
  EXPECT_EQ(good->Get("k", milliseconds(100)).value(), "v");
  auto fresh = ConnectTo(server->port());
  EXPECT_TRUE(fresh->Ping().ok());
}

TEST(Store, ClientOfAStoppedServerGetsAnErrorNotAHang) {
  auto server = StartServer();
  uint16_t port = server->port();
  auto idle = ConnectTo(port);
  auto parked = ConnectTo(port);
  Status parked_status;
  std::thread t([&] { parked_status = parked->Get("never", milliseconds(60000)).status(); });
  std::this_thread::sleep_for(milliseconds(100));
  auto start = Clock::now();
  server.reset();
  t.join();
  EXPECT_LT(MsSince(start), 5000);
  EXPECT_FALSE(parked_status.ok());
  EXPECT_EQ(parked_status.code(), StatusCode::kPeerFailed) << parked_status.ToString();
  Status st = idle->Set("k", "v");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << st.message();
  // Later calls fail fast, saying why.
  Status again = idle->Ping();
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("unusable"), std::string::npos) << again.message();
}

TEST(Store, SilentServerIsATimeoutNotAHang) {
  // A socket that listens but never answers (a wedged store).
  UniqueFd lis(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lis.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lis.get(), 4), 0);
  socklen_t len = sizeof(a);
  getsockname(lis.get(), reinterpret_cast<sockaddr*>(&a), &len);
  auto start = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", ntohs(a.sin_port), Deadline::AfterMs(300));
  EXPECT_LT(MsSince(start), 3000);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("did not authenticate as a store"), std::string::npos) << c.status().message();
}

TEST(Store, ConnectRetriesUntilTheServerIsUp) {
  // Find a free port, then start the server on it a little later.
  uint16_t port;
  {
    auto probe = StartServer();
    port = probe->port();
  }
  std::unique_ptr<StoreServer> late;
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(300));
    auto s = StoreServer::Start("127.0.0.1", port);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    late = std::move(s.value());
  });
  auto c = StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(10000));
  t.join();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c.value()->Ping().ok());
}

TEST(Store, ConnectGivesUpAtTheDeadlineNamingTheAddress) {
  uint16_t port;
  {
    auto probe = StartServer();
    port = probe->port();
  }
  auto start = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(300));
  int64_t took = MsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  EXPECT_NE(c.status().message().find("refused"), std::string::npos) << c.status().message();
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 3000);
  EXPECT_FALSE(StoreClient::Connect("127.0.0.1", 0, Deadline::AfterMs(10)).ok());
}

TEST(Store, PortInUseIsReportedAsUnavailable) {
  auto server = StartServer();
  auto second = StoreServer::Start("127.0.0.1", server->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find(std::to_string(server->port())), std::string::npos);
}

TEST(Store, AllInterfacesServerAcceptsIpv4Loopback) {
  auto server = StoreServer::Start("", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto c = ConnectTo(server.value()->port());
  EXPECT_TRUE(c->Set("a", "b").ok());
}

std::unique_ptr<StoreServer> StartServerWithSecret(const std::string& secret) {
  auto server = StoreServer::Start("127.0.0.1", 0, JobSecret(secret));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(server.value());
}

// A refused Connect must say so at once: the deadline is long, the error must come well before it.
Status ConnectRefused(uint16_t port, const JobSecret& secret) {
  auto start = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(60 * 1000), secret);
  EXPECT_LT(MsSince(start), 5000 * testing::kSlowdown);
  EXPECT_FALSE(c.ok());
  if (c.ok()) return Status::Ok();
  EXPECT_EQ(c.status().code(), StatusCode::kMismatch) << c.status().ToString();
  return c.status();
}

TEST(StoreSecret, RightSecretIsServed) {
  auto server = StartServerWithSecret("open sesame");
  auto c = StoreClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(5000), JobSecret("open sesame"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c.value()->Set("k", "v").ok());
  EXPECT_EQ(c.value()->Get("k", milliseconds(100)).value(), "v");
}

TEST(StoreSecret, WrongOrMissingSecretIsRefusedAtOnceAndLegitClientsAreServed) {
  auto server = StartServerWithSecret("open sesame");
  auto good = StoreClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(5000), JobSecret("open sesame"));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE(good.value()->Set("k", "v").ok());

  Status wrong = ConnectRefused(server->port(), JobSecret("open barley"));
  EXPECT_NE(wrong.message().find("did not prove the job secret"), std::string::npos) << wrong.message();
  Status none = ConnectRefused(server->port(), JobSecret());
  EXPECT_NE(none.message().find("requires a job secret and this process has none"), std::string::npos)
      << none.message();

  EXPECT_EQ(good.value()->Get("k", milliseconds(100)).value(), "v");
}

TEST(StoreSecret, SecretOnTheClientOnlyIsRefusedSayingSo) {
  auto server = StartServer();
  Status st = ConnectRefused(server->port(), JobSecret("open sesame"));
  EXPECT_NE(st.message().find("this process has a job secret but the store"), std::string::npos) << st.message();
  EXPECT_TRUE(ConnectTo(server->port())->Ping().ok());
}

TEST(StoreSecret, AStoreThatCannotProveTheSecretIsNotBelieved) {
  // A fake store: asks for a proof, then accepts anything with a made-up MAC of its own.
  UniqueFd lis(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lis.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lis.get(), 4), 0);
  socklen_t len = sizeof(a);
  getsockname(lis.get(), reinterpret_cast<sockaddr*>(&a), &len);
  std::thread fake([&] {
    UniqueFd c(accept(lis.get(), nullptr, nullptr));
    AuthChallenge ch;
    ch.secret = true;
    const std::string out = EncodeAuthChallenge(ch);
    (void)send(c.get(), out.data(), out.size(), MSG_NOSIGNAL);
    char proof[kAuthProofFrameBytes];
    size_t got = 0;
    while (got < sizeof(proof)) {
      ssize_t n = recv(c.get(), proof + got, sizeof(proof) - got, 0);
      if (n <= 0) return;
      got += static_cast<size_t>(n);
    }
    Sha256Digest bogus;
    bogus.fill(0x11);
    const std::string answer = EncodeAuthAccepted(bogus);
    (void)send(c.get(), answer.data(), answer.size(), MSG_NOSIGNAL);
  });
  Status st = ConnectRefused(ntohs(a.sin_port), JobSecret("open sesame"));
  fake.join();
  EXPECT_NE(st.message().find("did not prove the job secret: it is not this job's store"), std::string::npos)
      << st.message();
}

TEST(StoreSecret, NothingButTheProofIsReadBeforeAuthentication) {
  auto server = StartServerWithSecret("open sesame");
  const uint16_t port = server->port();
  // A large frame is refused on its length field, before its bytes.
  ExpectErrorAndClose(port, Le32(kMaxStoreFrameBytes) + "\x02\x01", "before authentication", false, false);
  // A request in place of the proof.
  ExpectErrorAndClose(port, EncodeRequest({StoreOp::kSet, {"k"}, "v", "", 0}), "not an AUTH_PROOF", false, false);
  // A proof that claims a secret with a made-up MAC.
  AuthProof forged;
  forged.has_secret = true;
  forged.mac.fill(0x5a);
  ExpectErrorAndClose(port, EncodeAuthProof(forged), "did not prove the job secret", false, false);
  // A proof without a secret.
  ExpectErrorAndClose(port, EncodeAuthProof(AuthProof{}), "requires a job secret", false, false);
  // None of them reached the store.
  auto good = StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(5000), JobSecret("open sesame"));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_FALSE(good.value()->Check({"k"}).value());
}

TEST(StoreSecret, ASilentClientIsDroppedAfterTheAuthenticationDeadline) {
  auto server = StartServerWithSecret("open sesame");
  RawConn silent(server->port());
  const auto start = Clock::now();
  bool closed = false;
  std::string got;
  // The server allows 10 s; each read waits up to 5 s.
  for (int i = 0; i < 6 * testing::kSlowdown && !closed; ++i) got += silent.ReadUntilClose(&closed);
  EXPECT_TRUE(closed) << "a client that never authenticates must not hold its connection";
  EXPECT_GE(MsSince(start), 9000);
  EXPECT_EQ(got.size(), kAuthChallengeFrameBytes);  // the challenge, then nothing
  auto good = StoreClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(5000), JobSecret("open sesame"));
  EXPECT_TRUE(good.ok()) << good.status().ToString();
}

// Once it stops accepting, the store serves its clients on, refuses new ones, and its
// port can host the next store at once.
TEST(Store, StopAcceptingFreesThePortAndKeepsClients) {
  auto server = StartServer();
  auto client = ConnectTo(server->port());
  ASSERT_TRUE(client->Set("k", "v").ok());
  server->StopAccepting();
  auto got = client->Get("k", milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value(), "v");
  // The listener closes on the server's thread: a new connection fails soon after.
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {
    refused = !StoreClient::Connect("127.0.0.1", server->port(), Deadline::AfterMs(50)).ok();
  }
  EXPECT_TRUE(refused);
  auto next = StoreServer::Start("127.0.0.1", server->port());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(client->Set("k2", "v2").ok());
}

}  // namespace
}  // namespace chorus::rendezvous
