// Membership at a live store: one job's ranks agree; a duplicate rank or another world
// size is named and posted under the job's abort key; released ranks serve the next
// job; a WatchedStore's wait ends on the posted reason.
#include "rendezvous/membership.h"

#include <cerrno>
#include <thread>

#include <gtest/gtest.h>

#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

namespace chorus::rendezvous {
namespace {

using std::chrono::milliseconds;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server.value());
    auto client = StoreClient::Connect("127.0.0.1", server_->port(), Deadline::AfterMs(5000));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    store_ = std::move(client.value());
  }
  Result<Membership> Claim(int rank, int size, const std::string& token) {
    return Membership::Claim(*store_, rank, size, Deadline::AfterMs(5000), token);
  }
  bool Posted(const Membership& m) {
    Result<bool> there = store_->Check({m.abort_key()});
    return there.ok() && there.value();
  }

  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<StoreClient> store_;
};

TEST_F(MembershipTest, OneJobsRanksShareItsAbortKey) {
  auto a = Claim(0, 3, "pid 1 on h #a"), b = Claim(1, 3, "pid 2 on h #b"), c = Claim(2, 3, "pid 3 on h #c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a.value().abort_key(), b.value().abort_key());
  EXPECT_EQ(a.value().abort_key(), c.value().abort_key());
  EXPECT_FALSE(Posted(a.value()));
}

// A process creating a second communicator claims its rank again.
TEST_F(MembershipTest, TheSameProcessMayClaimAgain) {
  ASSERT_TRUE(Claim(0, 2, "pid 1 on h #a").ok());
  EXPECT_TRUE(Claim(0, 2, "pid 1 on h #a").ok());
}

TEST_F(MembershipTest, ADuplicateRankIsNamedAndPosted) {
  auto first = Claim(1, 2, "pid 10 on h #a");
  ASSERT_TRUE(first.ok());
  auto second = Claim(1, 2, "pid 20 on g #b");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kMismatch);
  const std::string& msg = second.status().message();
  EXPECT_NE(msg.find("rank 1 is started twice: by pid 10 on h and by pid 20 on g"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("#"), std::string::npos) << "tokens' random parts stay out of messages: " << msg;
  EXPECT_TRUE(Posted(first.value()));
}

TEST_F(MembershipTest, AnotherWorldSizeIsNamedWithBothSizes) {
  ASSERT_TRUE(Claim(0, 2, "pid 10 on h #a").ok());
  auto other = Claim(1, 3, "pid 20 on h #b");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kMismatch);
  const std::string& msg = other.status().message();
  EXPECT_NE(msg.find("rank 1 (pid 20 on h) has WORLD_SIZE=3 but the job's is 2 (set by rank 0, pid 10 on h)"),
            std::string::npos)
      << msg;
}

// A store that outlives a job: once its processes released their ranks, the next job
// (other processes, another size) starts clean, with its own abort key.
TEST_F(MembershipTest, ReleasedRanksServeTheNextJob) {
  auto a = Claim(0, 2, "pid 1 on h #a"), b = Claim(1, 2, "pid 2 on h #b");
  ASSERT_TRUE(a.ok() && b.ok());
  PostAbort(*store_, a.value().abort_key(), MismatchError("the first job failed"));
  a.value().Release(*store_);
  b.value().Release(*store_);
  auto c = Claim(0, 3, "pid 3 on h #c"), d = Claim(1, 3, "pid 4 on h #d");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_NE(c.value().abort_key(), a.value().abort_key());
  EXPECT_FALSE(Posted(c.value()));
}

// Anyone who reaches the store can write the size key: garbage is named, not parsed.
TEST_F(MembershipTest, AGarbledJobRecordIsNamed) {
  ASSERT_TRUE(store_->Set("chorus/job/size", "lots").ok());
  ASSERT_TRUE(store_->Add("chorus/job/members", 1).ok());
  auto m = Claim(0, 2, "pid 1 on h #a");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(m.status().message().find("'lots'"), std::string::npos) << m.status().ToString();
}

TEST_F(MembershipTest, AWatchedWaitEndsWithThePostedReason) {
  auto m = Claim(0, 2, "pid 1 on h #a");
  ASSERT_TRUE(m.ok());
  WatchedStore watched(store_, m.value().abort_key());
  std::thread poster([&] {
    auto other = StoreClient::Connect("127.0.0.1", server_->port(), Deadline::AfterMs(5000));
    ASSERT_TRUE(other.ok());
    std::this_thread::sleep_for(milliseconds(100));
    PostAbort(*other.value(), m.value().abort_key(), IoError("rank 1 gave up", ENOSPC));
  });
  // Far longer than the test may take: the wait must end on the reason, not on time.
  auto got = watched.MultiGet({"never/0", "never/1"}, milliseconds(120 * 1000));
  poster.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kIoError);  // the poster's code
  EXPECT_NE(got.status().message().find("rank 1 gave up"), std::string::npos) << got.status().ToString();
  auto one = watched.Get("never/0", milliseconds(120 * 1000));
  EXPECT_EQ(one.status().code(), StatusCode::kIoError);
}

TEST_F(MembershipTest, AWatchedWaitStillTimesOutNamingTheKey) {
  WatchedStore watched(store_, "chorus/job/abort/none");
  auto got = watched.Get("missing", milliseconds(600));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kTimeout);
  EXPECT_NE(got.status().message().find("'missing'"), std::string::npos) << got.status().ToString();
}

}  // namespace
}  // namespace chorus::rendezvous
