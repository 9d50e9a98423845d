// The bootstrap ring with ranks as threads on loopback and chorus's own store: the
// all-gather at several sizes, O(1) store keys per rank, a rank that never comes, a
// rank that leaves mid-way, strangers that fail the handshake, a next rank whose
// reply is malformed and a neighbour that floods frames for a later all-gather.
#include "rendezvous/bootstrap_ring.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "rendezvous/bootstrap_ring_wire.h"
#include "rendezvous/socket_io.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "tests/rendezvous/store_fixture.h"

namespace chorus::rendezvous {
namespace {

#define EXPECT_CONTAINS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

constexpr uint64_t kCommId = 0x1234abcd;

// Counts what a rank asks of the store.
class CountingStore : public Store {
 public:
  explicit CountingStore(Store& inner) : inner_(inner) {}
  Status Set(const std::string& key, std::string value) override {
    sets.insert(key);
    ++calls;
    return inner_.Set(key, std::move(value));
  }
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    reads.insert(key);
    return inner_.Get(key, timeout);
  }
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) reads.insert(k);
    ++calls;
    return inner_.MultiGet(keys, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    ++calls;
    return inner_.Add(key, delta);
  }
  Result<bool> Check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) reads.insert(k);
    return inner_.Check(keys);
  }
  std::set<std::string> sets, reads;
  int calls = 0;  // everything but Get/Check (whose waits the ring slices)

 private:
  Store& inner_;
};

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

std::string RecordOf(int rank) {
  // Varying lengths, one large enough to take many partial sends.
  if (rank == 1) return std::string(3 << 20, static_cast<char>('a' + rank % 26));
  return "rank " + std::to_string(rank) + ":" + std::string(static_cast<size_t>(rank * 37 % 500), 'x');
}

using Ring = StoreServerTest;

TEST_F(Ring, AllGatherAtSeveralSizes) {
  for (int size : {1, 2, 3, 7, 32}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const int fds_before = OpenFds();
    const std::string prefix = "g" + std::to_string(size) + "/";
    std::mutex mu;
    auto st = RunRanks(size, [&](int r) -> Status {
      auto client = Client();
      if (!client) return InternalError("no store client");
      CountingStore store(*client);
      const Deadline deadline = Deadline::AfterMs(60000);
      auto ring = BootstrapRing::Create(store, prefix, r, size, "127.0.0.1", kCommId, JobSecret(), deadline);
      if (!ring.ok()) return ring.status();
      for (int round = 0; round < 2; ++round) {
        const std::string mine = RecordOf(r) + "/" + std::to_string(round);
        auto all = ring.value()->AllGather(mine, deadline);
        if (!all.ok()) return all.status();
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_EQ(all.value().size(), static_cast<size_t>(size));
        for (int q = 0; q < size && q < static_cast<int>(all.value().size()); ++q) {
          EXPECT_EQ(all.value()[q], RecordOf(q) + "/" + std::to_string(round)) << "rank " << r << " round " << round;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      // O(1) store traffic per rank: its own key set, its next rank's read.
      EXPECT_EQ(store.sets.size(), size == 1 ? 0u : 1u);
      EXPECT_EQ(store.reads.size(), size == 1 ? 0u : 1u);
      EXPECT_EQ(store.calls, size == 1 ? 0 : 1);
      if (size > 1) {
        EXPECT_EQ(*store.sets.begin(), prefix + "ring/" + std::to_string(r));
        EXPECT_EQ(*store.reads.begin(), prefix + "ring/" + std::to_string((r + 1) % size));
      }
      return Status::Ok();
    });
    for (int r = 0; r < size; ++r) EXPECT_TRUE(st[r].ok()) << st[r].ToString();
    // Every ring socket and store client closed (the store server, in this process,
    // closes its ends as it notices).
    for (int i = 0; i < 1000 && OpenFds() != fds_before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(OpenFds(), fds_before);
  }
}

TEST_F(Ring, ArgumentsAreChecked) {
  auto client = Client();
  ASSERT_TRUE(client);
  EXPECT_EQ(BootstrapRing::Create(*client, "a/", 3, 3, "127.0.0.1", kCommId, JobSecret(), Deadline::AfterMs(100))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  auto solo = BootstrapRing::Create(*client, "a/", 0, 1, "127.0.0.1", kCommId, JobSecret(), Deadline::AfterMs(100));
  ASSERT_TRUE(solo.ok());
  auto big = solo.value()->AllGather(std::string(BootstrapRing::kMaxRecordBytes + 1, 'x'), Deadline::AfterMs(100));
  ASSERT_TRUE(big.ok());  // one rank: nothing is sent
}

// Rank 3 of 6 never comes. Its neighbours (2 and 4) wait until their short deadline and
// name it; the others, whose deadline is far off, hear of it through the ring.
TEST_F(Ring, RankThatNeverComesIsNamedEverywhere) {
  constexpr int kSize = 6, kMissing = 3;
  auto st = RunRanks(kSize, [&](int r) -> Status {
    if (r == kMissing) return Status::Ok();
    auto client = Client();
    if (!client) return InternalError("no store client");
    const bool neighbour = r == kMissing - 1 || r == kMissing + 1;
    const Deadline deadline = Deadline::AfterMs(neighbour ? 1500 : 120000);
    auto ring = BootstrapRing::Create(*client, "miss/", r, kSize, "127.0.0.1", kCommId, JobSecret(), deadline);
    if (!ring.ok()) return ring.status();
    return ring.value()->AllGather("x", deadline).status();
  });
  for (int r = 0; r < kSize; ++r) {
    if (r == kMissing) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_FALSE(st[r].ok());
    EXPECT_CONTAINS(st[r].message(), "rank 3 of 6 never arrived");
    if (r != kMissing - 1 && r != kMissing + 1) {
      // Heard from a neighbour (the timeout's code travels with it), not its own far deadline.
      EXPECT_EQ(st[r].code(), StatusCode::kTimeout) << st[r].ToString();
      EXPECT_CONTAINS(st[r].message(), "heard from rank");
    }
  }
}

// Rank 2 of 5 joins the ring, then goes away without a word (as a crashed process
// would): every other rank fails naming it, long before its own deadline.
TEST_F(Ring, RankThatLeavesMidwayFailsEveryone) {
  constexpr int kSize = 5;
  std::atomic<int> formed{0};
  auto st = RunRanks(kSize, [&](int r) -> Status {
    auto client = Client();
    if (!client) return InternalError("no store client");
    const Deadline deadline = Deadline::AfterMs(120000);
    auto ring = BootstrapRing::Create(*client, "leave/", r, kSize, "127.0.0.1", kCommId, JobSecret(), deadline);
    ++formed;
    if (!ring.ok()) return ring.status();
    if (r == 2) {
      // Once the whole ring has formed: mid-way through the all-gather.
      while (formed < kSize) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ring.value()->Close();
      return Status::Ok();
    }
    return ring.value()->AllGather(std::string(1000, 'y'), deadline).status();
  });
  for (int r = 0; r < kSize; ++r) {
    if (r == 2) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_FALSE(st[r].ok());
    EXPECT_EQ(st[r].code(), StatusCode::kPeerFailed) << st[r].ToString();
    EXPECT_CONTAINS(st[r].message(), "rank 2");
  }
}

std::string HelloBytes(uint64_t comm_id, int sender, int receiver, int size, bool secret) {
  std::string out;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(0x43485247, 4);
  put(1, 2);
  put(secret ? 1 : 0, 2);
  put(comm_id, 8);
  put(static_cast<uint32_t>(sender), 4);
  put(static_cast<uint32_t>(receiver), 4);
  put(static_cast<uint32_t>(size), 4);
  put(0, 4);
  out.append(16, '\x5a');
  return out;
}

// Reads until `n` bytes or the end of the stream.
// A listening socket on 127.0.0.1 at a free port (invalid on failure).
UniqueFd ListenOnLoopback(uint16_t* port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd.get(), 4) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return UniqueFd();
  }
  *port = ntohs(a.sin_port);
  return fd;
}

std::string ReadUpTo(int fd, size_t n, Deadline deadline) {
  std::string buf;
  while (buf.size() < n) {
    if (!RecvSome(fd, &buf, deadline, "rank 1").ok()) break;
  }
  return buf;
}

// Strangers reach rank 1's ring port before rank 0 does: one from another
// communicator, one that cannot prove the job secret, one that sends junk. Each is
// closed and the ring forms regardless.
TEST_F(Ring, StrangersAreRefusedAndTheRingForms) {
  constexpr int kSize = 3;
  const JobSecret secret("the job's secret");
  std::atomic<bool> strangers_done{false};
  std::string wrong_comm_reply, wrong_secret_after_proof, junk_after;
  auto st = RunRanks(kSize + 1, [&](int r) -> Status {
    auto client = Client();
    if (!client) return InternalError("no store client");
    const Deadline deadline = Deadline::AfterMs(120000);
    if (r == kSize) {  // the strangers
      auto addr = client->Get("strange/ring/1", std::chrono::milliseconds(60000));
      if (!addr.ok()) return addr.status();
      const size_t colon = addr.value().rfind(':');
      auto resolved = Resolve(addr.value().substr(0, colon),
                              static_cast<uint16_t>(std::stoi(addr.value().substr(colon + 1))), SOCK_STREAM, false);
      if (!resolved.ok()) return resolved.status();
      {
        auto fd = ConnectOnce(resolved.value(), deadline);
        if (!fd.ok()) return fd.status();
        CHORUS_RETURN_IF_ERROR(SendAll(fd.value().get(), HelloBytes(kCommId + 1, 0, 1, kSize, true), deadline, "r1"));
        wrong_comm_reply = ReadUpTo(fd.value().get(), 1 << 16, deadline);
      }
      {
        auto fd = ConnectOnce(resolved.value(), deadline);
        if (!fd.ok()) return fd.status();
        CHORUS_RETURN_IF_ERROR(SendAll(fd.value().get(), HelloBytes(kCommId, 0, 1, kSize, true), deadline, "r1"));
        std::string reply = ReadUpTo(fd.value().get(), 72, deadline);
        if (reply.size() != 72) return InternalError("short reply to a good hello");
        CHORUS_RETURN_IF_ERROR(SendAll(fd.value().get(), std::string(32, '\1'), deadline, "r1"));
        wrong_secret_after_proof = ReadUpTo(fd.value().get(), 1, deadline);
      }
      {
        auto fd = ConnectOnce(resolved.value(), deadline);
        if (!fd.ok()) return fd.status();
        CHORUS_RETURN_IF_ERROR(SendAll(fd.value().get(), std::string(48, 'j'), deadline, "r1"));
        junk_after = ReadUpTo(fd.value().get(), 1, deadline);
      }
      strangers_done = true;
      return Status::Ok();
    }
    if (r == 0) {
      while (!strangers_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto ring = BootstrapRing::Create(*client, "strange/", r, kSize, "127.0.0.1", kCommId, secret, deadline);
    if (!ring.ok()) return ring.status();
    auto all = ring.value()->AllGather("r" + std::to_string(r), deadline);
    if (!all.ok()) return all.status();
    if (all.value() != std::vector<std::string>{"r0", "r1", "r2"}) return InternalError("wrong records");
    return Status::Ok();
  });
  for (int r = 0; r <= kSize; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
  // The other communicator got a refusal that says why; the others were closed on.
  EXPECT_CONTAINS(wrong_comm_reply, "comm id");
  EXPECT_TRUE(wrong_secret_after_proof.empty());
  EXPECT_TRUE(junk_after.empty());
}

// A rank whose secret differs fails its own connection with a mismatch, while the
// rank it reached ignores it (and then times out waiting for a real neighbour).
TEST_F(Ring, DifferentSecretIsAMismatch) {
  auto st = RunRanks(2, [&](int r) -> Status {
    auto client = Client();
    if (!client) return InternalError("no store client");
    const JobSecret secret(r == 0 ? "one" : "two");
    auto ring = BootstrapRing::Create(*client, "secret/", r, 2, "127.0.0.1", kCommId, secret, Deadline::AfterMs(1500));
    return ring.status();
  });
  ASSERT_FALSE(st[0].ok());
  ASSERT_FALSE(st[1].ok());
  // Each connector checks its acceptor's proof first; whichever ran into it says so.
  const std::string both = st[0].message() + " | " + st[1].message();
  EXPECT_CONTAINS(both, "did not prove the job secret");
}

// A stranger listens at the address rank 1 published: its malformed replies fail rank 0
// with a protocol error at once, however much it sends after the fixed part.
TEST_F(Ring, MalformedReplyFailsTheConnector) {
  ring_wire::Reply refuse;
  refuse.acceptor = 1;
  refuse.size = 2;
  refuse.reason = "refused";
  const std::string good = ring_wire::Encode(refuse);
  std::string oversized = good.substr(0, ring_wire::kReplySize);
  for (size_t i = 0; i < 4; ++i) oversized[20 + i] = '\xff';  // a reason of 4 GiB
  std::string magic = good;
  magic[0] ^= 1;
  std::string verdict = good;
  verdict[6] = 9;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {oversized, "a reason of 4294967295 bytes"}, {magic, "magic"}, {verdict, "verdict 9"}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::string& reply = cases[c].first;
    uint16_t port = 0;
    UniqueFd listener = ListenOnLoopback(&port);
    ASSERT_TRUE(listener.valid());
    auto client = Client();
    ASSERT_TRUE(client);
    const std::string prefix = "malformed" + std::to_string(c) + "/";
    ASSERT_TRUE(client->Set(prefix + "ring/1", "127.0.0.1:" + std::to_string(port)).ok());
    const Deadline deadline = Deadline::AfterMs(60000);
    std::string hello;
    std::thread stranger([&] {
      UniqueFd fd(accept(listener.get(), nullptr, nullptr));
      if (!fd.valid()) return;
      hello = ReadUpTo(fd.get(), ring_wire::kHelloSize, deadline);
      (void)SendAll(fd.get(), reply, deadline, "rank 0");
      // Then more than any reason may hold, until rank 0 closes.
      const std::string junk(1 << 16, 'j');
      for (int i = 0; i < 64; ++i) {
        if (send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL) <= 0) break;
      }
    });
    // A failed Create has closed its sockets: the stranger's sends end.
    const Status st =
        BootstrapRing::Create(*client, prefix, 0, 2, "127.0.0.1", kCommId, JobSecret(), deadline).status();
    stranger.join();
    EXPECT_EQ(hello.size(), ring_wire::kHelloSize);
    EXPECT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
    EXPECT_CONTAINS(st.message(), "did not answer as a chorus bootstrap ring");
    EXPECT_CONTAINS(st.message(), cases[c].second);
  }
}

// A neighbour that passes the handshake (rank 1 of 2, no secret), then floods frames
// for a later all-gather: rank 0 holds at most kMaxBufferedBytes of them (TCP holds
// the rest back), its first all-gather completes and its second fails at its deadline.
TEST_F(Ring, FloodFromANeighbourIsBounded) {
  constexpr size_t kFloodBytes = size_t{256} << 20;
  const Deadline deadline = Deadline::AfterMs(60000);
  auto client = Client();
  ASSERT_TRUE(client);
  uint16_t port = 0;
  UniqueFd listener = ListenOnLoopback(&port);
  ASSERT_TRUE(listener.valid());
  ASSERT_TRUE(client->Set("flood/ring/1", "127.0.0.1:" + std::to_string(port)).ok());

  // Frames of all-gather 2 from rank 1, sent over and over.
  std::string chunk;
  for (int i = 0; i < 16; ++i) chunk += ring_wire::Frame(ring_wire::kDataFrame, 2, 1, std::string(65520, 'f'));
  std::atomic<size_t> flooded{0};
  std::atomic<bool> flood_done{false};
  UniqueFd flood_fd, back_fd;
  std::thread flood;
  Status fake;
  std::thread neighbour([&] {
    fake = [&]() -> Status {
      // Rank 0 connects to rank 1: hello in, an accepting reply out.
      flood_fd = UniqueFd(accept(listener.get(), nullptr, nullptr));
      if (!flood_fd.valid()) return IoError("accept", errno);
      const timeval wait{60, 0};  // each blocked send ends by then
      (void)setsockopt(flood_fd.get(), SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
      if (ReadUpTo(flood_fd.get(), ring_wire::kHelloSize, deadline).size() != ring_wire::kHelloSize) {
        return InternalError("no hello from rank 0");
      }
      ring_wire::Reply accept_reply;
      accept_reply.accept = true;
      accept_reply.acceptor = 1;
      accept_reply.size = 2;
      const std::string reply = ring_wire::Encode(accept_reply);
      if (send(flood_fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(reply.size())) {
        return IoError("reply", errno);
      }
      flood = std::thread([&] {
        size_t off = 0;
        while (flooded < kFloodBytes) {
          const ssize_t n = send(flood_fd.get(), chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
          if (n <= 0) break;  // rank 0 closed (or the send timed out)
          flooded += static_cast<size_t>(n);
          off = (off + static_cast<size_t>(n)) % chunk.size();
        }
        flood_done = true;
      });
      // Rank 0 is still forming its ring: it has read (and holds) what it will.
      while (flooded < BootstrapRing::kMaxBufferedBytes && !flood_done && !deadline.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // Rank 1 connects to rank 0 and sends its record of all-gather 1, then nothing.
      auto own_client = Client();  // a store client is not shared between threads
      if (!own_client) return InternalError("no store client");
      auto addr = own_client->Get("flood/ring/0", std::chrono::milliseconds(deadline.RemainingMs()));
      if (!addr.ok()) return addr.status();
      const size_t colon = addr.value().rfind(':');
      auto resolved = Resolve(addr.value().substr(0, colon),
                              static_cast<uint16_t>(std::stoi(addr.value().substr(colon + 1))), SOCK_STREAM, false);
      if (!resolved.ok()) return resolved.status();
      auto fd = ConnectOnce(resolved.value(), deadline);
      if (!fd.ok()) return fd.status();
      back_fd = std::move(fd.value());
      const ring_wire::Hello hello{kCommId, 1, 0, 2, false, {}};
      CHORUS_RETURN_IF_ERROR(SendAll(back_fd.get(), ring_wire::Encode(hello), deadline, "rank 0"));
      if (ReadUpTo(back_fd.get(), ring_wire::kReplySize, deadline).size() != ring_wire::kReplySize) {
        return InternalError("no reply from rank 0");
      }
      return SendAll(back_fd.get(), ring_wire::Frame(ring_wire::kDataFrame, 1, 1, "one"), deadline, "rank 0");
    }();
  });

  [&] {
    auto ring = BootstrapRing::Create(*client, "flood/", 0, 2, "127.0.0.1", kCommId, JobSecret(), deadline);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    EXPECT_LE(ring.value()->buffered_bytes(), BootstrapRing::kMaxBufferedBytes);
    auto first = ring.value()->AllGather("zero", deadline);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first.value(), (std::vector<std::string>{"zero", "one"}));
    EXPECT_LE(ring.value()->buffered_bytes(), BootstrapRing::kMaxBufferedBytes);
    // Rank 1 sends nothing more for all-gather 2; the flood goes on meanwhile.
    auto second = ring.value()->AllGather("zero", Deadline::AfterMs(1000));
    EXPECT_EQ(second.status().code(), StatusCode::kTimeout) << second.status().ToString();
    EXPECT_CONTAINS(second.status().message(), "rank 1 of 2 never arrived");
    EXPECT_GT(ring.value()->buffered_bytes(), 0u);
    EXPECT_LE(ring.value()->buffered_bytes(), BootstrapRing::kMaxBufferedBytes);
  }();
  // The failed ring closed its sockets: the flood ends well short of its 256 MiB.
  (void)shutdown(listener.get(), SHUT_RDWR);  // an accept still waiting ends
  neighbour.join();
  if (flood.joinable()) flood.join();
  EXPECT_TRUE(fake.ok()) << fake.ToString();
  EXPECT_LT(flooded.load(), kFloodBytes);
}

}  // namespace
}  // namespace chorus::rendezvous
