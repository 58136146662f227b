// RoutedPrefixes, sgl-router's memory of what it sent to a node: matches are
// leading blocks, tokens are counted once per block, and a trim drops the
// least recently routed blocks, a chain's deeper blocks before its shallower
// ones, so what is left is always a set of whole prefixes.
#include "sim/routed_prefixes.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim/replay_trace.h"

namespace kvlearn {
namespace {

// Blocks of 4 tokens. Chains: A = {1,2,3}, B = {1,2,4} (shares 1,2 with A),
// C = {5}, D = {1,6}.
struct Fixture {
  Fixture() {
    trace.source = "hand";
    trace.block_size = 4;
    trace.Add(0, 12, 1, std::vector<uint64_t>{1, 2, 3});
    trace.Add(0, 12, 1, std::vector<uint64_t>{1, 2, 4});
    trace.Add(0, 4, 1, std::vector<uint64_t>{5});
    trace.Add(0, 8, 1, std::vector<uint64_t>{1, 6});
    replay = *BuildReplayTrace(trace, cost);
  }
  std::vector<BlockIndex> Chain(uint64_t first, size_t n) const {
    const auto begin = replay.blocks.begin() + static_cast<ptrdiff_t>(first);
    return {begin, begin + static_cast<ptrdiff_t>(n)};
  }
  Trace trace;
  CostModel cost{*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100")};
  ReplayTrace replay;
};

TEST(RoutedPrefixesTest, MatchesLeadingBlocksAndCountsEachBlockOnce) {
  Fixture f;
  const auto a = f.Chain(0, 3), b = f.Chain(3, 3), c = f.Chain(6, 1);
  RoutedPrefixes r(&f.replay.catalog);
  EXPECT_EQ(r.Match(a), 0u);
  r.Route(a);
  EXPECT_EQ(r.Match(a), 3u);
  EXPECT_EQ(r.Match(b), 2u);  // 1, 2; block 4 was never routed here
  EXPECT_EQ(r.Match(c), 0u);
  r.Route(b);
  EXPECT_EQ(r.tokens(), 16u);  // blocks 1, 2, 3, 4: 1 and 2 once
  EXPECT_EQ(r.blocks(), 4u);
}

// Routed A, then C, then B: from least to most recently routed 3 (A's), 5,
// then B's blocks deepest first: 4, 2, 1. Trimming to 12 tokens drops 3, then
// 5; 1, 2, 4 stay. Trimming to 4 drops 4, then 2, leaving the prefix {1}.
TEST(RoutedPrefixesTest, TrimDropsTheLeastRecentlyRoutedDeepestFirst) {
  Fixture f;
  const auto a = f.Chain(0, 3), b = f.Chain(3, 3), c = f.Chain(6, 1), d = f.Chain(7, 2);
  RoutedPrefixes r(&f.replay.catalog);
  r.Route(a);
  r.Route(c);
  r.Route(b);
  r.Trim(100);  // under the bound: nothing goes
  EXPECT_EQ(r.tokens(), 20u);
  r.Trim(12);
  EXPECT_EQ(r.tokens(), 12u);
  EXPECT_EQ(r.Match(a), 2u);
  EXPECT_EQ(r.Match(b), 3u);
  EXPECT_EQ(r.Match(c), 0u);
  r.Trim(4);
  EXPECT_EQ(r.tokens(), 4u);
  EXPECT_EQ(r.Match(b), 1u);
  EXPECT_EQ(r.Match(d), 1u);  // D = {1, 6} still finds its first block
  r.Trim(0);
  EXPECT_EQ(r.blocks(), 0u);
}

}  // namespace
}  // namespace kvlearn
