// Chain sampling: the budget rule, and that a kept branch keeps every use of
// its blocks below the root, so labels read from the sample are exact.
#include "learner/chain_sample.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace kvlearn {
namespace {

// Conversations on a shared root (id 0): conversation c's block at depth d is
// c * 100 + d; turn t re-reads the prompt and adds a block.
Trace Conversations(int conversations, int turns) {
  Trace t;
  int64_t ms = 0;
  for (int turn = 1; turn <= turns; ++turn) {
    for (int c = 1; c <= conversations; ++c) {
      std::vector<uint64_t> ids = {0};
      for (int d = 1; d <= turn; ++d) ids.push_back(uint64_t(c) * 100 + d);
      t.Add(ms += 7, uint32_t(ids.size()) * 512, 10, ids);
    }
  }
  return t;
}

ChainSample Plan(const Trace& t, uint64_t budget) {
  ChainBucketCounts counts;
  for (const TraceRequest& r : t.requests) counts.Add(t.BlocksOf(r));
  return PlanChainSample(counts, budget);
}

// Every block's use times, for blocks below the root.
std::map<uint64_t, std::vector<int64_t>> UsesBelowRoot(const Trace& t) {
  std::map<uint64_t, std::vector<int64_t>> uses;
  for (const TraceRequest& r : t.requests) {
    const auto ids = t.BlocksOf(r);
    for (size_t i = 1; i < ids.size(); ++i) uses[ids[i]].push_back(r.timestamp_ms);
  }
  return uses;
}

TEST(ChainSampleTest, KeepsEverythingWithinTheBudgetOrWithoutOne) {
  const Trace t = Conversations(50, 4);
  const uint64_t accesses = t.hash_ids.size();
  for (const uint64_t budget : {uint64_t{0}, accesses, accesses + 1}) {
    const ChainSample s = Plan(t, budget);
    EXPECT_TRUE(s.all());
    EXPECT_EQ(s.kept_accesses, accesses);
    EXPECT_EQ(SampleTrace(t, s).requests.size(), t.requests.size());
  }
}

TEST(ChainSampleTest, KeptAccessesFitTheBudgetAndAreThoseOfTheKeptRequests) {
  const Trace t = Conversations(400, 5);
  const uint64_t budget = t.hash_ids.size() / 3;
  const ChainSample s = Plan(t, budget);
  ASSERT_FALSE(s.all());
  EXPECT_LE(s.kept_accesses, budget);
  EXPECT_GT(s.kept_accesses, 0u);
  const Trace kept = SampleTrace(t, s);
  EXPECT_EQ(kept.hash_ids.size(), s.kept_accesses);
  // Whole conversations: each kept one keeps all its turns.
  EXPECT_EQ(kept.requests.size() % 5, 0u);
  EXPECT_LT(kept.requests.size(), t.requests.size());
}

TEST(ChainSampleTest, AKeptBlockBelowTheRootKeepsEveryUse) {
  const Trace t = Conversations(300, 6);
  const Trace kept = SampleTrace(t, Plan(t, t.hash_ids.size() / 4));
  const auto all = UsesBelowRoot(t);
  const auto sampled = UsesBelowRoot(kept);
  ASSERT_FALSE(sampled.empty());
  for (const auto& [id, times] : sampled) EXPECT_EQ(times, all.at(id)) << "block " << id;
}

TEST(ChainSampleTest, ABranchLargerThanTheBudgetIsKeptAlone) {
  // One conversation: its branch alone exceeds the budget, yet is kept.
  const Trace t = Conversations(1, 8);
  const ChainSample s = Plan(t, 3);
  EXPECT_EQ(SampleTrace(t, s).requests.size(), t.requests.size());
  EXPECT_GT(s.kept_accesses, 3u);
}

TEST(ChainSampleTest, TheBranchIsNamedByTheBlockAfterTheRoot) {
  const std::vector<uint64_t> a = {0, 5, 6}, b = {9, 5, 7, 8}, one = {5};
  EXPECT_EQ(ChainBucket(a), ChainBucket(b));
  EXPECT_EQ(ChainBucket(one), ChainBucket(std::vector<uint64_t>{1, 5}));
}

}  // namespace
}  // namespace kvlearn
