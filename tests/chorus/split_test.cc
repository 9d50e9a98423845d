// Sub-communicators (Split) run every collective correctly: ranks are renumbered by
// (key, old rank), roots and blocks follow the new numbering, groups of different
// sizes (1, 2, 3) run side by side, a split of a split works, ranks with a negative
// color get none, and the parent keeps working while (and after) its children do.
// Every result is checked against the scalar reference over the group's members.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "tests/chorus/api_case.h"
#include "tests/util/multiproc.h"

namespace chorus::testing {
namespace {

// Runs `how_many` rotating cases (every collective, dtype, op, placement, roots
// counted down from size-1) on `comm`, blocking and I-forms alternating.
int RunCases(Communicator& comm, uint64_t salt, int how_many, const std::string& where) {
  int i = 0;
  for (const ApiCase& spec : RotatingCases(comm.size(), salt, how_many, 100003)) {
    ApiCall call(spec, comm.rank(), comm.size());
    Status st = (i++ % 2 == 0) ? call.Run(comm) : call.Post(comm).Wait();
    RANK_CHECK(st.ok(), where + " " + spec.Describe() + ": " + st.ToString());
    RANK_OK(call.Check().WithContext(where));
  }
  return 0;
}

// 5 ranks split by parity, reversed by key: evens {4, 2, 0} become ranks 0, 1, 2 of
// a group of 3, odds {3, 1} ranks 0, 1 of a group of 2. Then each group splits
// again: its rank 0 opts out (color -1), the rest form one group.
TEST(Split, EveryCollectiveOnSubCommunicators) {
  const Options o = FileInitOptions();
  auto exits = RunRanks(5, [&](int rank) {
    auto world = Communicator::Create(o);
    RANK_OK(world.status());
    auto sub = (*world)->Split(rank % 2, -rank);
    RANK_OK(sub.status());
    RANK_CHECK(*sub != nullptr, "no sub-communicator");
    const int want_size = rank % 2 == 0 ? 3 : 2;
    const int want_rank = rank % 2 == 0 ? (4 - rank) / 2 : (3 - rank) / 2;
    RANK_CHECK((*sub)->size() == want_size, "size " + std::to_string((*sub)->size()));
    RANK_CHECK((*sub)->rank() == want_rank, "rank " + std::to_string((*sub)->rank()));
    if (RunCases(**sub, 100 + rank % 2, 45, "sub") != 0) return 1;

    // The parent and the child at once: I-collectives on both, then wait.
    std::vector<ApiCase> on_world = RotatingCases(5, 200, 9);
    std::vector<ApiCase> on_sub = RotatingCases((*sub)->size(), 300 + rank % 2, 9);
    std::vector<std::unique_ptr<ApiCall>> calls;
    std::vector<Work> works;
    for (size_t i = 0; i < on_world.size(); ++i) {
      calls.push_back(std::make_unique<ApiCall>(on_world[i], rank, 5));
      works.push_back(calls.back()->Post(**world));
      calls.push_back(std::make_unique<ApiCall>(on_sub[i], (*sub)->rank(), (*sub)->size()));
      works.push_back(calls.back()->Post(**sub));
    }
    for (size_t i = 0; i < works.size(); ++i) {
      RANK_OK(works[i].Wait().WithContext(calls[i]->spec().Describe()));
      RANK_OK(calls[i]->Check());
    }

    // A split of the split; the child's rank 0 gets no communicator.
    auto nested = (*sub)->Split((*sub)->rank() == 0 ? -1 : 0, 0);
    RANK_OK(nested.status());
    RANK_CHECK(((*sub)->rank() == 0) == (*nested == nullptr), "negative color must give no communicator");
    if (*nested != nullptr) {
      RANK_CHECK((*nested)->size() == want_size - 1 && (*nested)->rank() == (*sub)->rank() - 1, "nested rank");
      if (RunCases(**nested, 400 + rank % 2, 18, "nested") != 0) return 1;
      RANK_OK((*nested)->Shutdown());
    }
    // The parent is intact.
    if (RunCases(**world, 500, 18, "world") != 0) return 1;
    RANK_OK((*sub)->Shutdown());
    RANK_OK((*world)->Shutdown());
    return 0;
  });
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

// A color held by one rank only gives it a world of one, where every collective is a
// local copy; everyone else keeps working in its own group.
TEST(Split, SingleRankGroup) {
  const Options o = FileInitOptions();
  auto exits = RunRanks(3, [&](int rank) {
    auto world = Communicator::Create(o);
    RANK_OK(world.status());
    auto sub = (*world)->Split(rank == 1 ? 7 : 0, 0);
    RANK_OK(sub.status());
    RANK_CHECK((*sub)->size() == (rank == 1 ? 1 : 2), "size");
    if (RunCases(**sub, 600 + (rank == 1), 27, "sub") != 0) return 1;
    RANK_OK((*sub)->Shutdown());
    RANK_OK((*world)->Shutdown());
    return 0;
  });
  for (const RankExit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.Describe();
}

}  // namespace
}  // namespace chorus::testing
