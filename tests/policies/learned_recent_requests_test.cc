// LearnedRecentRequests (policies/learned/recent_requests.h): the run a
// refusal stakes is its own request's, found by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policies/learned/recent_requests.h"

namespace kvlearn {
namespace {

std::vector<BlockIndex> Blocks(const LearnedRecentRequests::Run& run) {
  return {run.blocks.begin(), run.blocks.end()};
}

TEST(LearnedRecentRequestsTest, TheRunIsTheNamedRequestsElseTheLatestHoldingTheBlock) {
  LearnedRecentRequests recent;
  recent.Begin(1, std::vector<BlockIndex>{0, 1, 2});
  recent.Begin(2, std::vector<BlockIndex>{0, 3});
  recent.Begin(3, std::vector<BlockIndex>{4});
  // Request 1's run from block 1, though request 3 began since.
  EXPECT_EQ(Blocks(recent.RunFrom(1, 0, 1)), (std::vector<BlockIndex>{1, 2}));
  // Block 0 is in requests 1 and 2: each names its own run.
  EXPECT_EQ(Blocks(recent.RunFrom(0, kNoBlock, 1)), (std::vector<BlockIndex>{0, 1, 2}));
  EXPECT_EQ(Blocks(recent.RunFrom(0, kNoBlock, 2)), (std::vector<BlockIndex>{0, 3}));
  // Request 3 does not hold block 0 (a sidecar names only the latest
  // request): the latest request that does, 2.
  EXPECT_EQ(Blocks(recent.RunFrom(0, kNoBlock, 3)), (std::vector<BlockIndex>{0, 3}));
  // No kept chain holds block 9.
  EXPECT_TRUE(recent.RunFrom(9, kNoBlock, 3).blocks.empty());
  EXPECT_EQ(recent.RunFrom(9, kNoBlock, 3).bet_entered, nullptr);
  // Each request has its own bet flag.
  *recent.RunFrom(1, 0, 1).bet_entered = true;
  EXPECT_TRUE(*recent.RunFrom(2, 1, 1).bet_entered);
  EXPECT_FALSE(*recent.RunFrom(3, 0, 2).bet_entered);
}

// Chains run from a root, so a block whose parent no chain held is in none
// either: a walk down such blocks searches the chains once. Seen here with
// a chain that does not run from a root ({6}, without its parent 5), which
// no caller passes: after 5 was found in no chain, 6 is not looked for.
// A request that begins since may hold them: the shortcut ends there.
TEST(LearnedRecentRequestsTest, AfterABlockNoChainHoldsItsChildIsNotLookedFor) {
  LearnedRecentRequests recent;
  recent.Begin(1, std::vector<BlockIndex>{6});
  EXPECT_EQ(Blocks(recent.RunFrom(6, 5, 1)), (std::vector<BlockIndex>{6})) << "searched";
  EXPECT_TRUE(recent.RunFrom(5, kNoBlock, 1).blocks.empty());
  EXPECT_TRUE(recent.RunFrom(6, 5, 1).blocks.empty()) << "not searched: its parent is in none";
  recent.Begin(2, std::vector<BlockIndex>{5, 6});
  EXPECT_EQ(Blocks(recent.RunFrom(6, 5, 2)), (std::vector<BlockIndex>{6}));
}

TEST(LearnedRecentRequestsTest, KeepsTheLatestKKeptRequests) {
  LearnedRecentRequests recent;
  recent.Begin(0, std::vector<BlockIndex>{7});
  for (uint32_t r = 1; r < LearnedRecentRequests::kKept; ++r) {
    recent.Begin(r, std::vector<BlockIndex>{8});
  }
  EXPECT_EQ(Blocks(recent.RunFrom(7, kNoBlock, 0)), (std::vector<BlockIndex>{7}))
      << "the oldest kept";
  recent.Begin(LearnedRecentRequests::kKept, std::vector<BlockIndex>{8});
  EXPECT_TRUE(recent.RunFrom(7, kNoBlock, 0).blocks.empty()) << "one more pushed it out";
}

// Saved and loaded through a compaction that forgets block 2 and renumbers
// 0 -> 0, 1 -> 1, 3 -> 2: the chains lose block 2, keep their order, their
// requests and their bet flags.
TEST(LearnedRecentRequestsTest, LoadsWhatItSavedAndDropsForgottenBlocks) {
  LearnedRecentRequests original;
  original.Begin(1, std::vector<BlockIndex>{0, 1, 2});
  original.Begin(2, std::vector<BlockIndex>{0, 3});
  *original.RunFrom(3, 0, 2).bet_entered = true;
  PolicyStateWriter out;
  original.Save(std::vector<BlockIndex>{0, 1, kNoBlock, 2}, out);
  const std::string bytes = out.Take();
  PolicyStateReader in(bytes, 3);
  LearnedRecentRequests loaded;
  loaded.Load(in);
  const absl::Status finished = in.Finish();
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(Blocks(loaded.RunFrom(0, kNoBlock, 1)), (std::vector<BlockIndex>{0, 1}));
  EXPECT_FALSE(*loaded.RunFrom(0, kNoBlock, 1).bet_entered);
  EXPECT_EQ(Blocks(loaded.RunFrom(0, kNoBlock, 2)), (std::vector<BlockIndex>{0, 2}));
  EXPECT_TRUE(*loaded.RunFrom(0, kNoBlock, 2).bet_entered);
  // The newest is still request 2: a block of both chains read for an
  // unknown request is request 2's.
  EXPECT_EQ(Blocks(loaded.RunFrom(0, kNoBlock, 99)), (std::vector<BlockIndex>{0, 2}));
}

TEST(LearnedRecentRequestsTest, DamagedBytesAreRefusedNamingTheField) {
  PolicyStateWriter out;
  out.Varint(LearnedRecentRequests::kKept + 1);
  const std::string bytes = out.Take();
  PolicyStateReader in(bytes, 3);
  LearnedRecentRequests loaded;
  loaded.Load(in);
  const absl::Status s = in.Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("learned recent requests"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvlearn
