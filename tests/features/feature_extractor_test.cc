// The feature schema and the one extractor, on cases worked out by hand.
#include "features/feature_extractor.h"

#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <set>
#include <string>

#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"
#include "features/access_history.h"
#include "features/feature_schema.h"

namespace kvlearn {
namespace {

TEST(FeatureSchemaTest, EveryFeatureHasOneDistinctSnakeCaseName) {
  static_assert(kFeatureNames.size() == kNumFeatures);
  std::set<std::string_view> seen;
  for (std::string_view name : kFeatureNames) {
    ASSERT_FALSE(name.empty());
    EXPECT_TRUE(seen.insert(name).second) << "feature name repeated: " << name;
    for (char c : name) {
      EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) ||
                  std::isdigit(static_cast<unsigned char>(c)) || c == '_')
          << name;
    }
  }
  EXPECT_GE(kFeatureSchemaVersion, 1u);
}

// A root A with two children B and C, 512 tokens and 1 MB each; A costs 2 ms
// to recompute, B and C 3 ms; the pool link moves 25e6 B/ms, so loading a
// block takes T = 1e6 / 25e6 = 0.04 ms.
// Requests: [A, B] at 0 s, [A, B] at 10 s, [A, C] at 70 s; features read at
// 130 s with A and B resident in a 4 MB pool.
class ThreeRequestsTest : public ::testing::Test {
 protected:
  ThreeRequestsTest() : pool_(&catalog_, 4'000'000), history_(&catalog_) {
    a_ = catalog_.Add({.hash_id = 10,
                       .parent = kNoBlock,
                       .depth = 0,
                       .tokens = 512,
                       .bytes = 1'000'000,
                       .recompute_gpu_ms = 2.0});
    b_ = catalog_.Add({.hash_id = 11,
                       .parent = a_,
                       .depth = 1,
                       .tokens = 512,
                       .bytes = 1'000'000,
                       .recompute_gpu_ms = 3.0});
    c_ = catalog_.Add({.hash_id = 12,
                       .parent = a_,
                       .depth = 1,
                       .tokens = 512,
                       .bytes = 1'000'000,
                       .recompute_gpu_ms = 3.0});
    pool_.Grow(catalog_.size());
    pool_.Insert(a_);
    pool_.Insert(b_);
    const std::array<BlockIndex, 2> ab = {a_, b_}, ac = {a_, c_};
    history_.Record(ab, 0);
    history_.Record(ab, 10'000);
    history_.Record(ac, 70'000);
  }

  std::array<float, kNumFeatures> Extract(BlockIndex b) const {
    std::array<float, kNumFeatures> out{};
    FeatureExtractor(FeatureConfig{.link_bytes_per_ms = 25e6})
        .Extract(b, 130'000, catalog_, history_, pool_, out);
    return out;
  }

  BlockCatalog catalog_;
  PoolState pool_;
  AccessHistory history_;
  BlockIndex a_ = kNoBlock, b_ = kNoBlock, c_ = kNoBlock;
};

TEST_F(ThreeRequestsTest, RootBlock) {
  const auto f = Extract(a_);
  EXPECT_FLOAT_EQ(f[kDepth], 0);
  EXPECT_FLOAT_EQ(f[kPrefixTokensLog], std::log1p(512.0));
  EXPECT_FLOAT_EQ(f[kBlockTokens], 1.0);
  EXPECT_FLOAT_EQ(f[kChildrenLog], std::log1p(2.0));  // B and C
  EXPECT_FLOAT_EQ(f[kIsLeaf], 0);                     // B is resident under it
  EXPECT_FLOAT_EQ(f[kBlockBytesLog], std::log1p(1e6));
  EXPECT_FLOAT_EQ(f[kRecomputeMsLog], std::log1p(2.0));
  EXPECT_FLOAT_EQ(f[kTransferMsLog], std::log1p(0.04));
  EXPECT_FLOAT_EQ(f[kSavingMsLog], std::log1p(2.0 - 0.04));
  // Accessed at 70, 10 and 0 s: age 60 s, gaps 60 s and 10 s, then none (a day).
  EXPECT_FLOAT_EQ(f[kAgeLog], std::log1p(60.0));
  EXPECT_FLOAT_EQ(f[kGap1Log], std::log1p(60.0));
  EXPECT_FLOAT_EQ(f[kGap2Log], std::log1p(10.0));
  EXPECT_FLOAT_EQ(f[kGap3Log], std::log1p(86400.0));
  EXPECT_FLOAT_EQ(f[kGap4Log], std::log1p(86400.0));
  // 1-minute decayed count: 1 at 0 s; e^(-10/60) + 1 at 10 s; times e^(-60/60),
  // plus 1, at 70 s; times e^(-60/60) at 130 s.
  const double at70 = (std::exp(-10.0 / 60) + 1) * std::exp(-1.0) + 1;
  EXPECT_NEAR(f[kDecayed1mLog], std::log1p(at70 * std::exp(-1.0)), 1e-6);
  EXPECT_FLOAT_EQ(f[kAccessesLog], std::log1p(3.0));
  EXPECT_FLOAT_EQ(f[kSubtreeAccessesLog], std::log1p(3.0));  // every request went deeper
  EXPECT_FLOAT_EQ(f[kBurst1s], 0);
  EXPECT_FLOAT_EQ(f[kBurst10s], 0);
  EXPECT_FLOAT_EQ(f[kPoolOccupancy], 0.5);  // 2 MB of 4 MB
  EXPECT_FLOAT_EQ(f[kEvictionRate], 0);
  // Latest request [A, C]: A is its first of two blocks.
  EXPECT_FLOAT_EQ(f[kTailBlocksLog], std::log1p(1.0));
  EXPECT_FLOAT_EQ(f[kRequestBlocksLog], std::log1p(2.0));
}

TEST_F(ThreeRequestsTest, ResidentLeafUsedTwice) {
  const auto f = Extract(b_);
  EXPECT_FLOAT_EQ(f[kDepth], 1);
  EXPECT_FLOAT_EQ(f[kPrefixTokensLog], std::log1p(1024.0));
  EXPECT_FLOAT_EQ(f[kChildrenLog], 0);
  EXPECT_FLOAT_EQ(f[kIsLeaf], 1);
  EXPECT_FLOAT_EQ(f[kAgeLog], std::log1p(120.0));  // last used at 10 s
  EXPECT_FLOAT_EQ(f[kGap1Log], std::log1p(10.0));
  EXPECT_FLOAT_EQ(f[kGap2Log], std::log1p(86400.0));
  EXPECT_FLOAT_EQ(f[kAccessesLog], std::log1p(2.0));
  EXPECT_FLOAT_EQ(f[kSubtreeAccessesLog], 0);  // both requests ended at B
  EXPECT_FLOAT_EQ(f[kTailBlocksLog], 0);       // last of [A, B]
  EXPECT_FLOAT_EQ(f[kRequestBlocksLog], std::log1p(2.0));
  // B arrived with A, a run from the root: no fork, its gap a day.
  EXPECT_FLOAT_EQ(f[kForkRunsLog], 0);
  EXPECT_FLOAT_EQ(f[kForkReusedLog], 0);
  EXPECT_FLOAT_EQ(f[kForkGapLog], std::log1p(86400.0));
}

TEST_F(ThreeRequestsTest, BlockOutsideThePoolIsNoLeaf) {
  const auto f = Extract(c_);
  EXPECT_FLOAT_EQ(f[kIsLeaf], 0);  // not resident
  EXPECT_FLOAT_EQ(f[kAgeLog], std::log1p(60.0));
  EXPECT_FLOAT_EQ(f[kAccessesLog], std::log1p(1.0));
  // C left known ground at A, whose runs are B (used again) and C, and whose
  // last two accesses were at 70 and 10 s.
  EXPECT_FLOAT_EQ(f[kForkRunsLog], std::log1p(2.0));
  EXPECT_FLOAT_EQ(f[kForkReusedLog], std::log1p(1.0));
  EXPECT_FLOAT_EQ(f[kForkGapLog], std::log1p(60.0));
}

// Fan-out: S, then [S, X1, Y1] at 0 s, [S, X2, Y2] at 1 s and [S, X1] at
// 2 s. Y2 is the second block of a run that left S: its fork is S (not its
// parent X2, new with it), whose runs X1 and X2 came 1 s apart and of which
// X1 was used again. Y1's run started at the root's request too, but S was
// new then: no fork.
TEST(FeatureExtractorTest, ARunOfNewBlocksForksWhereItsRequestLeftKnownBlocks) {
  BlockCatalog catalog;
  const auto add = [&catalog](uint64_t id, BlockIndex parent, uint32_t depth) {
    return catalog.Add({.hash_id = id,
                        .parent = parent,
                        .depth = depth,
                        .tokens = 512,
                        .bytes = 1,
                        .recompute_gpu_ms = 1});
  };
  const BlockIndex s = add(1, kNoBlock, 0);
  const BlockIndex x1 = add(2, s, 1), y1 = add(3, x1, 2);
  const BlockIndex x2 = add(4, s, 1), y2 = add(5, x2, 2);
  PoolState pool(&catalog, 0);
  AccessHistory history(&catalog);
  history.Record(std::array{s, x1, y1}, 0);
  history.Record(std::array{s, x2, y2}, 1'000);
  history.Record(std::array{s, x1}, 2'000);
  std::array<float, kNumFeatures> f{};
  const FeatureExtractor extractor(FeatureConfig{});
  extractor.Extract(y2, 3'000, catalog, history, pool, f);
  EXPECT_FLOAT_EQ(f[kForkRunsLog], std::log1p(2.0));
  EXPECT_FLOAT_EQ(f[kForkReusedLog], std::log1p(1.0));
  EXPECT_FLOAT_EQ(f[kForkGapLog], std::log1p(1.0));  // S at 2 s and 1 s
  extractor.Extract(y1, 3'000, catalog, history, pool, f);
  EXPECT_FLOAT_EQ(f[kForkRunsLog], 0);
  EXPECT_FLOAT_EQ(f[kForkGapLog], std::log1p(86400.0));

  // Saved and loaded whole, every block reads the same; with S forgotten (a
  // compaction renumbering the others down by one), Y2 has no fork left.
  PolicyStateWriter out;
  const std::array<BlockIndex, 5> same = {0, 1, 2, 3, 4};
  history.Save(same, 0, out);
  AccessHistory loaded(&catalog);
  PolicyStateReader in(out.bytes(), catalog.size());
  loaded.Load(in, 0);
  ASSERT_TRUE(in.Finish().ok()) << in.status();
  std::array<float, kNumFeatures> g{};
  for (const BlockIndex b : {s, x1, y1, x2, y2}) {
    extractor.Extract(b, 3'000, catalog, history, pool, f);
    extractor.Extract(b, 3'000, catalog, loaded, pool, g);
    EXPECT_EQ(f, g) << "block " << b;
  }
  PolicyStateWriter without_s;
  const std::array<BlockIndex, 5> forget_s = {kNoBlock, 0, 1, 2, 3};
  history.Save(forget_s, 0, without_s);
  AccessHistory compacted(&catalog);
  PolicyStateReader in2(without_s.bytes(), catalog.size());
  compacted.Load(in2, 0);
  ASSERT_TRUE(in2.Finish().ok()) << in2.status();
  EXPECT_EQ(compacted.Of(3).fork, kNoBlock);  // Y2, renumbered 4 -> 3
  EXPECT_EQ(compacted.Of(3).accesses, 1u);
}

// One 512-token block in a pool of no capacity, used at `times_ms`.
struct OneBlockUsedAt {
  explicit OneBlockUsedAt(std::initializer_list<int64_t> times_ms) {
    const std::array<BlockIndex, 1> chain = {a};
    for (const int64_t t : times_ms) history.Record(chain, t);
  }
  BlockCatalog catalog;
  const BlockIndex a =
      catalog.Add({.hash_id = 1, .tokens = 512, .bytes = 1, .recompute_gpu_ms = 1});
  PoolState pool{&catalog, 0};
  AccessHistory history{&catalog};
};

TEST(FeatureExtractorTest, BurstCountsAccessesWithinOneAndTenSeconds) {
  // One block used at 0, 5, 9.5 and 10 s; read at 10.5 s: ages 10.5, 5.5, 1
  // and 0.5 s, so two within 1 s and three within 10 s.
  const OneBlockUsedAt one({0, 5'000, 9'500, 10'000});
  std::array<float, kNumFeatures> f{};
  FeatureExtractor(FeatureConfig{}).Extract(one.a, 10'500, one.catalog, one.history, one.pool, f);
  EXPECT_FLOAT_EQ(f[kBurst1s], 2);
  EXPECT_FLOAT_EQ(f[kBurst10s], 3);
  EXPECT_FLOAT_EQ(f[kPoolOccupancy], 1.0);  // a pool of no capacity reads as full
}

TEST(FeatureExtractorTest, EachBlockOfAChainDecaysByItsOwnIdleTime) {
  // A, B, C in a row, used together at 0 s; A and B at 30 s; all three at
  // 90 s: A and B were idle 60 s and C 90 s, so C must not take the factor
  // its ancestors just shared. 1-minute counts read at 90 s:
  // A and B (e^(-30/60) + 1) e^(-60/60) + 1, C e^(-90/60) + 1.
  BlockCatalog catalog;
  const BlockIndex a =
      catalog.Add({.hash_id = 1, .tokens = 512, .bytes = 1, .recompute_gpu_ms = 1});
  const BlockIndex b = catalog.Add(
      {.hash_id = 2, .parent = a, .depth = 1, .tokens = 512, .bytes = 1, .recompute_gpu_ms = 1});
  const BlockIndex c = catalog.Add(
      {.hash_id = 3, .parent = b, .depth = 2, .tokens = 512, .bytes = 1, .recompute_gpu_ms = 1});
  PoolState pool(&catalog, 10);
  AccessHistory history(&catalog);
  const std::array<BlockIndex, 3> abc = {a, b, c};
  const std::array<BlockIndex, 2> ab = {a, b};
  history.Record(abc, 0);
  history.Record(ab, 30'000);
  history.Record(abc, 90'000);
  const double shared = (std::exp(-0.5) + 1) * std::exp(-1.0) + 1;
  std::array<float, kNumFeatures> f{};
  for (const BlockIndex x : {a, b}) {
    FeatureExtractor(FeatureConfig{}).Extract(x, 90'000, catalog, history, pool, f);
    EXPECT_NEAR(f[kDecayed1mLog], std::log1p(shared), 1e-6) << x;
  }
  FeatureExtractor(FeatureConfig{}).Extract(c, 90'000, catalog, history, pool, f);
  EXPECT_NEAR(f[kDecayed1mLog], std::log1p(std::exp(-1.5) + 1), 1e-6);
}

TEST(FeatureExtractorTest, GapsAreKeptToFortyNineDaysAndNeverBelowZero) {
  // Uses at 0, 60 days, then 1 s earlier (time went back): the first gap
  // reads as 2^32 - 1 ms (49.7 days), the second as 0, and a snapshot keeps
  // both.
  constexpr int64_t kSixtyDaysMs = int64_t{60} * 86'400'000;
  const OneBlockUsedAt one({0, kSixtyDaysMs, kSixtyDaysMs - 1'000});
  EXPECT_EQ(one.history.Of(one.a).gap_ms[0], 0u);
  EXPECT_EQ(one.history.Of(one.a).gap_ms[1], UINT32_MAX);
  std::array<float, kNumFeatures> f{};
  const FeatureExtractor extractor(FeatureConfig{});
  extractor.Extract(one.a, kSixtyDaysMs, one.catalog, one.history, one.pool, f);
  EXPECT_FLOAT_EQ(f[kGap1Log], 0);
  EXPECT_FLOAT_EQ(f[kGap1Log + 1], std::log1p(UINT32_MAX / 1000.0));
  EXPECT_FLOAT_EQ(f[kGap1Log + 2], std::log1p(86400.0));  // a third gap: none yet

  PolicyStateWriter out;
  const std::array<BlockIndex, 1> same = {0};
  one.history.Save(same, 0, out);
  AccessHistory loaded(&one.catalog);
  PolicyStateReader in(out.bytes(), one.catalog.size());
  loaded.Load(in, 0);
  ASSERT_TRUE(in.Finish().ok()) << in.status();
  EXPECT_EQ(loaded.Of(one.a).last_ms, kSixtyDaysMs - 1'000);
  EXPECT_EQ(loaded.Of(one.a).gap_ms, one.history.Of(one.a).gap_ms);
}

TEST(FeatureExtractorTest, ASnapshotWhoseTimesAreNotNewestFirstIsRefused) {
  BlockCatalog catalog;
  catalog.Add({.hash_id = 1, .tokens = 512, .bytes = 1, .recompute_gpu_ms = 1});
  // The record AccessHistory::Save writes, with times 5 s then 7 s.
  PolicyStateWriter out;
  out.Varint(0);  // evictions since the last count
  out.Float(0);   // eviction rate
  out.Varint(1);  // one record
  out.Varint(0);  // block 0
  out.Varint(2);  // two times kept
  out.Signed(5'000);
  out.Signed(7'000);
  for (int i = 0; i < 6; ++i) out.Varint(1);  // accesses and the other counts
  out.Varint(0);                              // no fork
  for (int i = 0; i < 3; ++i) out.Float(1);   // decayed counts
  AccessHistory loaded(&catalog);
  PolicyStateReader in(out.bytes(), catalog.size());
  loaded.Load(in, 0);
  EXPECT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("history times: not newest first"), std::string::npos)
      << in.status();
}

TEST(FeatureExtractorTest, BlockNeverSeenReadsAsADayOld) {
  BlockCatalog catalog;
  const BlockIndex a =
      catalog.Add({.hash_id = 1, .tokens = 256, .bytes = 1, .recompute_gpu_ms = 1});
  PoolState pool(&catalog, 10);
  AccessHistory history(&catalog);
  std::array<float, kNumFeatures> f{};
  FeatureExtractor(FeatureConfig{}).Extract(a, 5'000, catalog, history, pool, f);
  EXPECT_FLOAT_EQ(f[kBlockTokens], 0.5);
  EXPECT_FLOAT_EQ(f[kAgeLog], std::log1p(86400.0));
  for (int g = 0; g < 4; ++g) EXPECT_FLOAT_EQ(f[kGap1Log + g], std::log1p(86400.0));
  EXPECT_FLOAT_EQ(f[kDecayed1hLog], 0);
  EXPECT_FLOAT_EQ(f[kAccessesLog], 0);
}

}  // namespace
}  // namespace kvlearn
