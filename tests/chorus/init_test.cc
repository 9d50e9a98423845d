// Creating communicators the ways PyTorch users do: env://, tcp://, file://, a
// launcher's variables; and the errors a wrong setup gets.
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "common/fd_limit.h"
#include "gtest/gtest.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "tests/util/multiproc.h"
#include "tests/util/slowdown.h"

namespace chorus {
namespace {

using testing::ExpectAllOk;
using testing::RankExit;
using testing::RunRanks;

// Creates a communicator with `options`, checks rank/size against the expectations
// and exchanges one int around the ring.
int RingHello(const Options& options, int want_rank, int want_size) {
  auto comm = Communicator::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "create failed: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator& c = **comm;
  if (c.rank() != want_rank || c.size() != want_size) {
    std::fprintf(stderr, "got rank %d size %d, want %d %d\n", c.rank(), c.size(), want_rank, want_size);
    return 2;
  }
  int out = 1000 + c.rank(), in = -1;
  int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  Work s = c.ISend(&out, sizeof(out), next);
  if (!c.Recv(&in, sizeof(in), prev).ok() || !s.Wait().ok() || in != 1000 + prev) return 3;
  if (c.local_size() != c.size() || c.local_rank() != c.rank()) return 4;  // all on this host
  return c.Shutdown().ok() ? 0 : 5;
}

TEST(Init, EnvMethod) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(testing::FreePort())}};
  ExpectAllOk(RunRanks(
      3, [](int r) { return RingHello(Options(), r, 3); }, mp));
}

TEST(Init, TcpMethod) {
  Options o;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  ExpectAllOk(RunRanks(2, [&](int r) { return RingHello(o, r, 2); }));
}

TEST(Init, FileMethodWithExplicitRanks) {
  const std::string path = testing::UniqueRendezvousFile();
  ExpectAllOk(RunRanks(2, [&](int r) {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    Options o;
    o.init_method = "file://" + path;
    o.rank = r;
    o.world_size = 2;
    return RingHello(o, r, 2);
  }));
}

// Ranks launched by SLURM: no RANK/WORLD_SIZE, only SLURM's variables.
TEST(Init, SlurmVariables) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", std::to_string(testing::FreePort())},
            {"SLURM_NTASKS", "2"},
            {"SLURM_JOB_NODELIST", "localhost"}};
  ExpectAllOk(RunRanks(
      2,
      [](int r) {
        unsetenv("RANK");
        unsetenv("WORLD_SIZE");
        setenv("SLURM_PROCID", std::to_string(r).c_str(), 1);
        setenv("SLURM_LOCALID", std::to_string(r).c_str(), 1);
        return RingHello(Options(), r, 2);
      },
      mp));
}

// The application's store, under a prefix of its own as torch's PrefixStore does it:
// what torch_chorus hands a communicator.
class PrefixedStore : public rendezvous::Store {
 public:
  PrefixedStore(std::shared_ptr<rendezvous::StoreClient> client, std::string prefix)
      : client_(std::move(client)), prefix_(std::move(prefix)) {}
  Status Set(const std::string& key, std::string value) override { return client_->Set(prefix_ + key, value); }
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    return client_->Get(prefix_ + key, timeout);
  }
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override {
    return client_->MultiGet(Prefixed(keys), timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return client_->Add(prefix_ + key, delta); }
  Result<bool> Check(const std::vector<std::string>& keys) override { return client_->Check(Prefixed(keys)); }

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::shared_ptr<rendezvous::StoreClient> client_;
  std::string prefix_;
};

// Two communicators meet in one store the application runs (no port of chorus's own),
// each under its prefix, with explicit ranks: rank 1 of the second is rank 0 of the first.
TEST(Init, GivenStoreWithPrefixes) {
  const uint16_t port = testing::FreePort();
  ExpectAllOk(RunRanks(2, [&](int r) {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    // Rank 0 hosts the store: ranks forked after a server thread started would come
    // from a threaded process, which ThreadSanitizer refuses.
    std::unique_ptr<rendezvous::StoreServer> server;
    if (r == 0) {
      auto started = rendezvous::StoreServer::Start("127.0.0.1", port);
      RANK_OK(started.status());
      server = std::move(started.value());
    }
    auto client = rendezvous::StoreClient::Connect("127.0.0.1", port, Deadline::AfterMs(10000));
    RANK_OK(client.status());
    std::shared_ptr<rendezvous::StoreClient> shared = std::move(client.value());
    Options a;
    a.rank = r;
    a.world_size = 2;
    a.store = std::make_shared<PrefixedStore>(shared, "group_a/");
    Options b = a;
    b.rank = 1 - r;
    b.store = std::make_shared<PrefixedStore>(shared, "group_b/");
    auto ca = Communicator::Create(a);
    RANK_OK(ca.status());
    auto cb = Communicator::Create(b);
    RANK_OK(cb.status());
    RANK_CHECK((*cb)->rank() == 1 - r, "second communicator's rank");
    RANK_CHECK((*ca)->Describe().find("init store") != std::string::npos, (*ca)->Describe());
    int x = r + 1;
    RANK_OK((*ca)->AllReduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum));
    RANK_CHECK(x == 3, "sum over the first communicator");
    int y = 10 * (*cb)->rank();
    RANK_OK((*cb)->Broadcast(&y, 1, DataType::kInt32, /*root=*/1));
    RANK_CHECK(y == 10, "broadcast from the second communicator's rank 1");
    RANK_OK((*cb)->Shutdown());
    RANK_OK((*ca)->Shutdown());
    // Without CHORUS_SECRET, rank 0 of each made one for its data connections.
    auto secret = shared->Get("group_a/chorus/comm0/secret", std::chrono::milliseconds(0));
    RANK_OK(secret.status());
    RANK_CHECK(secret.value().size() == 64, "a 256-bit secret in hex: " + secret.value());
    // The store outlives rank 1's last use of it.
    if (r == 1) RANK_OK(shared->Set("rank1_done", "1"));
    if (r == 0) RANK_OK(shared->Get("rank1_done", std::chrono::milliseconds(10000)).status());
    return 0;
  }));
}

// In a rank (the process configuration is read once, and later tests set theirs; and
// no store thread runs before the fork, which TSan refuses): a store of its own with
// `preset` in it, then Create as `rank` of `size`, which must fail naming `want`.
int CreateWithStoreFails(int rank, int size, const std::vector<std::pair<std::string, std::string>>& preset,
                         const std::string& want) {
  auto server = rendezvous::StoreServer::Start("127.0.0.1", 0);
  RANK_OK(server.status());
  auto client = rendezvous::StoreClient::Connect("127.0.0.1", server.value()->port(), Deadline::AfterMs(10000));
  RANK_OK(client.status());
  for (const auto& [key, value] : preset) RANK_OK(client.value()->Set(key, value));
  Options o;
  o.store = std::move(client.value());
  o.rank = rank;
  o.world_size = size;
  auto comm = Communicator::Create(o);
  RANK_CHECK(!comm.ok(), "created as rank " + std::to_string(rank) + " of " + std::to_string(size));
  RANK_CHECK(comm.status().message().find(want) != std::string::npos, comm.status().ToString());
  return 0;
}

// Rank and size are the caller's when the store is given.
TEST(Init, GivenStoreNeedsRankAndSize) {
  ExpectAllOk(RunRanks(1, [](int) { return CreateWithStoreFails(2, 2, {}, "rank 2 is not in [0, 2)"); }));
}

// A malformed communicator id in the store (anyone who reaches the store can write
// one) is an error naming the key, not an exception that ends the process.
TEST(Init, MalformedIdInTheStoreIsNamed) {
  ExpectAllOk(RunRanks(1, [](int) {
    return CreateWithStoreFails(1, 2, {{"chorus/comm0/id", "42; rm -rf /"}}, "chorus/comm0/id");
  }));
}

TEST(Init, MissingVariablesAreNamed) {
  auto exits = RunRanks(1, [](int) {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    auto comm = Communicator::Create();
    if (comm.ok()) return 1;
    std::string msg = comm.status().message();
    std::fprintf(stderr, "%s\n", msg.c_str());
    return msg.find("RANK") != std::string::npos ? 0 : 2;
  });
  ExpectAllOk(exits);
}

TEST(Init, BadConfigVariableIsNamed) {
  testing::MultiProcOptions mp;
  mp.env = {{"CHORUS_TCP_ENGINE", "carrier-pigeon"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}};
  ExpectAllOk(RunRanks(
      1,
      [](int) {
        auto comm = Communicator::Create();
        if (comm.ok()) return 1;
        std::string msg = comm.status().message();
        return msg.find("CHORUS_TCP_ENGINE") != std::string::npos && msg.find("carrier-pigeon") != std::string::npos
                   ? 0
                   : 2;
      },
      mp));
}

// Creates a communicator with `o` (and a connect timeout far beyond the test: errors
// must not wait for it), shuts it down and returns the first error, printed.
Status CreateAndShutDown(int rank, Options o) {
  if (!o.config) o.config = Config::Process();
  o.config->connect_timeout_ms = 120 * 1000;
  auto comm = Communicator::Create(o);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return comm.status();
  }
  return (*comm)->Shutdown();
}

// Creates a communicator through env:// as rank `rank` of `size` and returns the error
// (OK when it was created).
Status CreateAs(int rank, int size) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  return CreateAndShutDown(rank, Options());
}

// Two processes with RANK=1 (rank 2 never comes, so the job cannot finish without it):
// every process fails with the duplicate named, none at its deadline.
TEST(Init, DuplicateRankIsNamedOnEveryRank) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(testing::FreePort())}};
  ExpectAllOk(RunRanks(
      3,
      [](int r) {
        Status st = CreateAs(r == 2 ? 1 : r, 3);
        return st.code() == StatusCode::kMismatch && st.message().find("rank 1 is started twice") != std::string::npos
                   ? 0
                   : 1;
      },
      mp));
}

// WORLD_SIZE 2 on one rank and 3 on the other: both fail naming both sizes.
TEST(Init, DifferentWorldSizesAreNamedOnEveryRank) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(testing::FreePort())}};
  ExpectAllOk(RunRanks(
      2,
      [](int r) {
        Status st = CreateAs(r, r == 0 ? 2 : 3);
        const std::string& m = st.message();
        return st.code() == StatusCode::kMismatch && m.find("world size differs") != std::string::npos &&
                       m.find("WORLD_SIZE=") != std::string::npos
                   ? 0
                   : 1;
      },
      mp));
}

// A communicator created right after the last one was destroyed (env://: rank 0's new
// store takes the port its old one just left), again and again.
TEST(Init, CreateAfterDestroyWorksEveryTime) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(testing::FreePort())}};
  mp.timeout_seconds = 600;
  ExpectAllOk(RunRanks(
      2,
      [](int r) {
        constexpr int kRounds = 200;
        Config c = Config::Process();
        c.connect_timeout_ms = 30 * 1000;
        Options o;
        o.config = c;
        for (int i = 0; i < kRounds; ++i) {
          auto comm = Communicator::Create(o);
          if (!comm.ok()) {
            std::fprintf(stderr, "rank %d, round %d: %s\n", r, i, comm.status().ToString().c_str());
            return 1;
          }
          int v = 1, sum = 0;
          Status st = (*comm)->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
          if (!st.ok() || sum != 2) {
            std::fprintf(stderr, "rank %d, round %d: sum %d, %s\n", r, i, sum, st.ToString().c_str());
            return 2;
          }
        }
        return 0;
      },
      mp));
}

// Creates a 2-rank communicator over TCP (file://) with 64 sockets per peer after
// setting this process's RLIMIT_NOFILE: the soft limit `soft_extra` descriptors beyond
// those open, the hard one too where `lower_hard` (else as it was).
Status CreateWithFdLimit(const std::string& path, int rank, int64_t soft_extra, bool lower_hard) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return IoError("getrlimit", errno);
  lim.rlim_cur = static_cast<rlim_t>(OpenFdCount() + soft_extra);
  if (lower_hard) lim.rlim_max = lim.rlim_cur;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return IoError("setrlimit", errno);
  Options o;
  o.init_method = "file://" + path;
  o.world_size = 2;
  o.rank = rank;
  Config c = Config::Process();
  c.transport = TransportMode::kTcp;
  c.nsocks_per_peer = 64;
  o.config = c;
  return CreateAndShutDown(rank, o);
}

// A rank whose RLIMIT_NOFILE cannot hold its TCP mesh fails naming the limit, the need
// and the settings that lower it; the other rank hears why at once.
TEST(Init, TooFewFileDescriptorsAreNamedOnEveryRank) {
  const std::string path = testing::UniqueRendezvousFile();
  ExpectAllOk(RunRanks(2, [&](int r) {
    Status st = r == 1 ? CreateWithFdLimit(path, r, 40, true) : CreateWithFdLimit(path, r, 1000, false);
    const std::string& m = st.message();
    return m.find("RLIMIT_NOFILE is") != std::string::npos && m.find("rank 1") != std::string::npos &&
                   m.find("CHORUS_NSOCKS_PERPEER") != std::string::npos
               ? 0
               : 1;
  }));
}

// A soft limit too low for the mesh is raised toward the hard one, and set-up goes on.
TEST(Init, ASoftFileDescriptorLimitIsRaised) {
  const std::string path = testing::UniqueRendezvousFile();
  ExpectAllOk(RunRanks(2, [&](int r) {
    if (!CreateWithFdLimit(path, r, 40, false).ok()) return 1;
    rlimit lim{};
    return getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur >= static_cast<rlim_t>(OpenFdCount() + 64) ? 0 : 2;
  }));
}

// A rank that never comes: the others fail at the connect timeout, naming it.
TEST(Init, MissingRankTimesOutNamingIt) {
  const std::string path = testing::UniqueRendezvousFile();
  ExpectAllOk(RunRanks(2, [&](int r) {
    Options o;
    o.init_method = "file://" + path;
    o.world_size = 3;  // rank 2 never starts
    o.rank = r;
    Config c = Config::Process();
    c.connect_timeout_ms = 2000;
    o.config = c;
    auto comm = Communicator::Create(o);
    if (comm.ok()) return 1;
    std::string msg = comm.status().message();
    std::fprintf(stderr, "%s\n", msg.c_str());
    // Rank 0 hosts the store and names the missing rank; rank 1 may instead see the
    // store go away when rank 0 gives up first (a few ms apart): an error either way.
    if (r == 0)
      return msg.find("rank 2 of 3 never arrived") != std::string::npos && comm.status().code() == StatusCode::kTimeout
                 ? 0
                 : 2;
    return (comm.status().code() == StatusCode::kTimeout && msg.find("rank 2") != std::string::npos) ||
                   comm.status().code() == StatusCode::kPeerFailed
               ? 0
               : 3;
  }));
}

// CHORUS_SECRET on every rank: the store and the TCP mesh admit them, an all_reduce runs.
TEST(Init, JobSecretOnEveryRankRunsAnAllReduce) {
  testing::MultiProcOptions mp;
  mp.env = {{"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", std::to_string(testing::FreePort())},
            {"CHORUS_SECRET", "open sesame"},
            {"CHORUS_TRANSPORT", "tcp"}};
  ExpectAllOk(RunRanks(
      2,
      [](int r) {
        auto comm = Communicator::Create();
        RANK_CHECK(comm.ok(), comm.status().ToString());
        float in[4] = {1.0f + r, 2, 3, 4}, out[4] = {};
        Status st = (*comm)->AllReduce(in, out, 4, DataType::kFloat32, ReduceOp::kSum);
        RANK_CHECK(st.ok(), st.ToString());
        RANK_CHECK(out[0] == 3.0f && out[3] == 8.0f, "wrong sum");
        return (*comm)->Shutdown().ok() ? 0 : 5;
      },
      mp));
}

// A secret on one rank only: the rank that lacks or has it extra fails at once, naming
// the side without it; the store's rank (which cannot tell a stranger from a
// misconfigured rank, and must not let strangers stop the job) fails at its deadline.
TEST(Init, JobSecretOnOneRankOnlyIsAClearErrorNotAHang) {
  for (int with : {0, 1}) {
    const int port = testing::FreePort();
    ExpectAllOk(RunRanks(2, [&](int r) {
      Options o;
      o.init_method = "tcp://127.0.0.1:" + std::to_string(port);
      o.rank = r;
      o.world_size = 2;
      Config c = Config::Process();
      c.connect_timeout_ms = 4000 * testing::kSlowdown;
      if (r == with) c.secret = JobSecret("open sesame");
      o.config = c;
      const auto start = Clock::now();
      auto comm = Communicator::Create(o);
      if (comm.ok()) return 1;
      std::string msg = comm.status().message();
      std::fprintf(stderr, "rank %d: %s\n", r, msg.c_str());
      if (r == 0) return 0;  // its deadline: an error, not a hang
      if (Clock::now() - start > std::chrono::milliseconds(c.connect_timeout_ms / 2)) return 2;  // not a deadline
      const char* want =
          with == 0 ? "requires a job secret and this process has none" : "this process has a job secret but the store";
      return msg.find(want) != std::string::npos && comm.status().code() == StatusCode::kMismatch ? 0 : 3;
    }));
  }
}

}  // namespace
}  // namespace chorus
