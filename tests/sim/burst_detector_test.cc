#include "sim/burst_detector.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvlearn {
namespace {

const std::vector<BlockIndex> kA = {1, 2, 3};
const std::vector<BlockIndex> kB = {1, 5, 6};  // same first block, different 2-block prefix
const std::vector<BlockIndex> kShort = {2};

TEST(BurstDetectorTest, DefaultsArePublishedRule) {
  const BurstRule rule;
  EXPECT_EQ(rule.arrivals, 2u);
  EXPECT_EQ(rule.window_ms, 1000);
  EXPECT_EQ(rule.prefix_blocks, 128u);
}

// X = 3 within Z = 1000 ms on the 2-block prefix.
TEST(BurstDetectorTest, FiresOnTheXthArrivalWithinTheWindowInclusive) {
  BurstDetector d({3, 1000, 2});
  EXPECT_FALSE(d.Observe(kA, 0));
  EXPECT_FALSE(d.Observe(kA, 500));
  EXPECT_TRUE(d.Observe(kA, 1000));  // 1000 - 0 == Z: still within
  // The window restarts after a trigger.
  EXPECT_FALSE(d.Observe(kA, 1001));
  EXPECT_FALSE(d.Observe(kA, 1500));
  EXPECT_FALSE(d.Observe(kA, 2002));  // 1001 fell out: {1500, 2002}
  EXPECT_TRUE(d.Observe(kA, 2400));   // {1500, 2002, 2400}
  EXPECT_EQ(d.triggers(), 2u);
}

TEST(BurstDetectorTest, ArrivalsOutsideTheWindowDoNotCount) {
  BurstDetector d({2, 1000, 2});
  EXPECT_FALSE(d.Observe(kA, 0));
  EXPECT_FALSE(d.Observe(kA, 1001));
  EXPECT_TRUE(d.Observe(kA, 2001));
}

TEST(BurstDetectorTest, KeysAreTheYBlockPrefix) {
  BurstDetector d({2, 1000, 2});
  EXPECT_FALSE(d.Observe(kA, 0));
  EXPECT_FALSE(d.Observe(kB, 10));  // differs in block 2: another key
  EXPECT_FALSE(d.Observe(kShort, 20));
  EXPECT_FALSE(d.Observe(kShort, 30));  // shorter than Y: never counts
  EXPECT_TRUE(d.Observe(kB, 40));
  EXPECT_TRUE(d.Observe(kA, 50));
  // With Y = 1 both share the key.
  BurstDetector one({2, 1000, 1});
  EXPECT_FALSE(one.Observe(kA, 0));
  EXPECT_TRUE(one.Observe(kB, 1));
}

TEST(BurstDetectorTest, SweepForgetsStaleKeysWithoutChangingDecisions) {
  BurstDetector d({2, 100, 1});
  for (BlockIndex k = 0; k < 10000; ++k) {
    const std::vector<BlockIndex> chain = {k};
    ASSERT_FALSE(d.Observe(chain, k * 1000));
  }
  EXPECT_FALSE(d.Observe(std::vector<BlockIndex>{9999}, 9999 * 1000 + 101));
  EXPECT_TRUE(d.Observe(std::vector<BlockIndex>{9999}, 9999 * 1000 + 150));
}

}  // namespace
}  // namespace kvlearn
