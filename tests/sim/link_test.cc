#include "sim/link.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvlearn {
namespace {

TEST(LinkTest, LoneTransferRunsAtFullBandwidth) {
  Link link(1e6);  // 1 GB/s = 1e6 bytes per ms
  EXPECT_TRUE(std::isinf(link.NextCompletionMs()));
  link.Start(5, 3e6, 7);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 8);
  EXPECT_EQ(link.PopCompletion(), 7u);
  EXPECT_DOUBLE_EQ(link.now_ms(), 8);
  EXPECT_EQ(link.active(), 0u);
}

// A: 2e6 bytes from t=0; B: 1e6 bytes from t=1. A alone moves 1e6 by t=1;
// then each gets 0.5e6 B/ms, so both have 1e6 left and finish together at 3.
TEST(LinkTest, ConcurrentTransfersShareBandwidth) {
  Link link(1e6);
  link.Start(0, 2e6, 1);
  link.Start(1, 1e6, 2);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 3);
  EXPECT_EQ(link.PopCompletion(), 1u);  // tie: started first
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 3);
  EXPECT_EQ(link.PopCompletion(), 2u);
}

// Three transfers of 1e6, 2e6 and 3e6 bytes at t=0: a third of the bandwidth
// each until the first ends at 3; then halves until the second ends at 5;
// the last runs alone and ends at 6.
TEST(LinkTest, ShareGrowsAsTransfersFinish) {
  Link link(1e6);
  link.Start(0, 3e6, 3);
  link.Start(0, 1e6, 1);
  link.Start(0, 2e6, 2);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 3);
  EXPECT_EQ(link.PopCompletion(), 1u);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 5);
  EXPECT_EQ(link.PopCompletion(), 2u);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 6);
  EXPECT_EQ(link.PopCompletion(), 3u);
  EXPECT_EQ(link.started_bytes(), 6e6);
  EXPECT_EQ(link.completed_bytes(), 6e6);
}

TEST(LinkTest, ZeroByteTransferCompletesAtOnce) {
  Link link(1e6);
  link.Start(2, 0, 9);
  EXPECT_DOUBLE_EQ(link.NextCompletionMs(), 2);
  EXPECT_EQ(link.PopCompletion(), 9u);
}

}  // namespace
}  // namespace kvlearn
