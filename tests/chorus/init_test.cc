// Creating communicators the ways PyTorch users do: env://, tcp://, file://, a
// launcher's variables; and the errors a wrong setup gets.
#include <cstdio>
#include <string>

#include "chorus/communicator.h"
#include "gtest/gtest.h"
#include "tests/util/multiproc.h"

namespace chorus {
namespace {

using testing::RankExit;
using testing::ExpectAllOk;
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
  ExpectAllOk(RunRanks(3, [](int r) { return RingHello(Options(), r, 3); }, mp));
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
  ExpectAllOk(RunRanks(2, [](int r) {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", std::to_string(r).c_str(), 1);
    setenv("SLURM_LOCALID", std::to_string(r).c_str(), 1);
    return RingHello(Options(), r, 2);
  }, mp));
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
  ExpectAllOk(RunRanks(1, [](int) {
    auto comm = Communicator::Create();
    if (comm.ok()) return 1;
    std::string msg = comm.status().message();
    return msg.find("CHORUS_TCP_ENGINE") != std::string::npos && msg.find("carrier-pigeon") != std::string::npos
               ? 0
               : 2;
  }, mp));
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
    if (r == 0) return msg.find("rank 2 of 3 never arrived") != std::string::npos && comm.status().code() == StatusCode::kTimeout ? 0 : 2;
    return (comm.status().code() == StatusCode::kTimeout && msg.find("rank 2") != std::string::npos) ||
                   comm.status().code() == StatusCode::kPeerFailed
               ? 0
               : 3;
  }));
}

}  // namespace
}  // namespace chorus
