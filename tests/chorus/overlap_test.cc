// Overlapping asynchronous collectives through the public API: many I-collectives
// of every kind in flight on one communicator (with blocking calls made while they
// run), and on two or three communicators at once (a communicator and the ones split
// from it), posted interleaved, waited for out of order, from several threads. Each
// result is checked against the scalar reference: the per-call tag spaces must keep
// every call's bytes apart.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

struct InFlight {
  std::unique_ptr<ApiCall> call;
  Work work;
  std::string where;  // which communicator, for errors
};

InFlight PostCase(Communicator& comm, const ApiCase& spec, const std::string& where) {
  InFlight f;
  f.call = std::make_unique<ApiCall>(spec, comm.rank(), comm.size());
  f.work = f.call->Post(comm);
  f.where = where;
  return f;
}

// Waits for every call (last posted first) and checks it.
int WaitAndCheck(std::vector<InFlight>& flights) {
  for (size_t i = flights.size(); i-- > 0;) {
    InFlight& f = flights[i];
    Status st = f.work.Wait();
    RANK_CHECK(st.ok(), f.where + " " + f.call->spec().Describe() + ": " + st.ToString());
    RANK_OK(f.call->Check().WithContext(f.where));
  }
  return 0;
}

// 30 I-collectives of every kind, dtype and op in flight at once (1 MiB + 3 elements
// among them), with blocking calls made while they run; the first is polled with
// Test() until done, the others waited for in reverse order.
int ManyOnOneCommunicator(int rank, const Options& o) {
  auto comm = Communicator::Create(o);
  RANK_OK(comm.status());
  Communicator& c = **comm;
  const int n = c.size();
  std::vector<InFlight> flights;
  std::vector<ApiCase> cases = RotatingCases(n, 1, 30, (size_t{1} << 20) / 8 + 3);
  for (size_t i = 0; i < cases.size(); ++i) {
    flights.push_back(PostCase(c, cases[i], "async"));
    if (i == cases.size() / 2) {
      // Blocking calls while half the asynchronous ones are queued or running.
      for (const ApiCase& spec : RotatingCases(n, 2, 9)) {
        ApiCall call(spec, rank, n);
        RANK_OK(call.Run(c).WithContext("blocking " + spec.Describe()));
        RANK_OK(call.Check().WithContext("blocking"));
      }
    }
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flights[0].work.Test()) {
    RANK_CHECK(std::chrono::steady_clock::now() < give_up, "Test() never turned true");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WaitAndCheck(flights) != 0) return 1;
  RANK_OK(c.Shutdown());
  return 0;
}

class Overlap : public ::testing::TestWithParam<int> {};

TEST_P(Overlap, ManyCollectivesInFlightOnOneCommunicator) {
  const Options o = FileInitOptions();
  ExpectAllOk(RunRanks(GetParam(), [&](int r) { return ManyOnOneCommunicator(r, o); }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Overlap, ::testing::Values(2, 3, 5),
                         [](const ::testing::TestParamInfo<int>& info) { return "n" + std::to_string(info.param); });

// Three communicators over 4 ranks: the world, the world again in reverse rank order
// (Split with one color, key -rank) and pairs (Split by parity). I-collectives on
// all three posted interleaved, then waited for; then one thread per communicator
// making blocking calls at the same time.
TEST(OverlapTwoCommunicators, InterleavedAsyncAndConcurrentThreads) {
  const Options o = FileInitOptions();
  ExpectAllOk(RunRanks(4, [&](int rank) {
    auto world = Communicator::Create(o);
    RANK_OK(world.status());
    auto reversed = (*world)->Split(0, -rank);
    RANK_OK(reversed.status());
    RANK_CHECK((*reversed)->rank() == 3 - rank, "reversed rank " + std::to_string((*reversed)->rank()));
    auto pairs = (*world)->Split(rank % 2, rank);
    RANK_OK(pairs.status());
    RANK_CHECK((*pairs)->size() == 2 && (*pairs)->rank() == rank / 2, "pair rank");
    Communicator* comms[] = {world->get(), reversed->get(), pairs->get()};
    const char* names[] = {"world", "reversed", "pairs"};

    std::vector<std::vector<ApiCase>> cases;
    for (int k = 0; k < 3; ++k) cases.push_back(RotatingCases(comms[k]->size(), 10 + k, 18, 70000));
    std::vector<InFlight> flights;
    for (size_t i = 0; i < cases[0].size(); ++i) {
      for (int k = 0; k < 3; ++k) flights.push_back(PostCase(*comms[k], cases[k][i], names[k]));
    }
    if (WaitAndCheck(flights) != 0) return 1;

    // Blocking calls, one thread per communicator, all at once.
    std::vector<int> results(3, -1);
    std::vector<std::thread> threads;
    for (int k = 0; k < 3; ++k) {
      threads.emplace_back([&, k] {
        results[k] = [&]() -> int {
          for (const ApiCase& spec : RotatingCases(comms[k]->size(), 20 + k, 27, 70000)) {
            ApiCall call(spec, comms[k]->rank(), comms[k]->size());
            RANK_OK(call.Run(*comms[k]).WithContext(std::string(names[k]) + " " + spec.Describe()));
            RANK_OK(call.Check().WithContext(names[k]));
          }
          return 0;
        }();
      });
    }
    for (std::thread& t : threads) t.join();
    for (int k = 0; k < 3; ++k) RANK_CHECK(results[k] == 0, std::string(names[k]) + " thread failed");

    RANK_OK((*pairs)->Shutdown());
    RANK_OK((*reversed)->Shutdown());
    RANK_OK((*world)->Shutdown());
    return 0;
  }));
}

}  // namespace
}  // namespace chorus::testing
