// DropRequestsBreakingPrefixes on traces worked out by hand.
#include "datasets/prefix_conflicts.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace kvlearn {
namespace {

// One request per chain, lines numbered from 1, 10 ms apart.
Trace TraceOf(const std::vector<std::vector<uint64_t>>& chains) {
  Trace t;
  t.block_size = 16;
  uint32_t line = 0;
  for (const auto& ids : chains) {
    ++line;
    t.Add(10 * line, static_cast<uint32_t>(16 * ids.size()), 1, ids, line);
  }
  return t;
}

std::vector<std::vector<uint64_t>> Chains(const Trace& t) {
  std::vector<std::vector<uint64_t>> out;
  for (const TraceRequest& r : t.requests) {
    const auto ids = t.BlocksOf(r);
    out.emplace_back(ids.begin(), ids.end());
  }
  return out;
}

TEST(PrefixConflictsTest, PrefixHashesAreKeptWhole) {
  Trace t = TraceOf({{1, 2, 3}, {1, 2, 4}, {1, 5}, {6}});
  const auto before = Chains(t);
  const DroppedRequests d = DropRequestsBreakingPrefixes(t);
  EXPECT_EQ(d.requests, 0u);
  EXPECT_EQ(d.first_line, 0u);
  EXPECT_EQ(Chains(t), before);
}

TEST(PrefixConflictsTest, TwoNumberingsLoseTheRequestsThatDisagreeWithEarlierOnes) {
  // Node A: 1 -> 2 -> 3. Node B numbers its own chain 2 -> 3 (2 as a root:
  // conflict on line 2) and 7 -> 1 (1 under 7: conflict on line 4). Line 3
  // reuses A's prefix and a new id; line 5 only ids never seen.
  Trace t = TraceOf({{1, 2, 3}, {2, 3}, {1, 2, 9}, {7, 1}, {8, 10}});
  const DroppedRequests d = DropRequestsBreakingPrefixes(t);
  EXPECT_EQ(d.requests, 2u);
  EXPECT_EQ(d.first_line, 2u);
  EXPECT_EQ(Chains(t), (std::vector<std::vector<uint64_t>>{{1, 2, 3}, {1, 2, 9}, {8, 10}}));
  // The kept requests keep their lines and point at their own ids.
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[1].line, 3u);
  EXPECT_EQ(t.requests[2].first_block, 6u);
  EXPECT_EQ(t.hash_ids.size(), 8u);
}

TEST(PrefixConflictsTest, ADroppedRequestLeavesNoParentsBehind) {
  // Line 2 conflicts at its second id (5 under 1, then 2 under 5): none of
  // its ids is remembered, so line 3 may give 5 a parent of its own.
  Trace t = TraceOf({{1, 2}, {1, 5, 2}, {4, 5}});
  const DroppedRequests d = DropRequestsBreakingPrefixes(t);
  EXPECT_EQ(d.requests, 1u);
  EXPECT_EQ(d.first_line, 2u);
  EXPECT_EQ(Chains(t), (std::vector<std::vector<uint64_t>>{{1, 2}, {4, 5}}));
}

}  // namespace
}  // namespace kvlearn
