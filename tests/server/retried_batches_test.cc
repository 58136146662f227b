// The window of batch ids the sidecar remembers (server/retried_batches.h):
// resends inside it are recognised, its bounds hold, and ids count per source.
#include "server/retried_batches.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlearn {
namespace {

TEST(RetriedBatchesTest, AResendIsRecognisedPerSource) {
  RetriedBatches seen;
  EXPECT_TRUE(seen.Claim("a", 7));
  EXPECT_FALSE(seen.Claim("a", 7));
  EXPECT_TRUE(seen.Claim("b", 7));  // another source may use the number
  EXPECT_TRUE(seen.Claim("a", 0));  // no id: always applied, never remembered
  EXPECT_TRUE(seen.Claim("a", 0));
}

TEST(RetriedBatchesTest, TheSourceIsTheFirstEventsNodeUnlessNamed) {
  v1::EventBatch batch;
  batch.set_batch_id(3);
  batch.add_events()->set_node_id("node-1");
  EXPECT_EQ(RetriedBatches::SourceOf(batch), "node-1");
  RetriedBatches seen;
  EXPECT_TRUE(*seen.Claim(batch));
  EXPECT_FALSE(seen.Claim("node-1", 3));
  batch.set_source("client-9");
  EXPECT_EQ(RetriedBatches::SourceOf(batch), "client-9");
  EXPECT_TRUE(*seen.Claim(batch));
  batch.set_source(std::string(RetriedBatches::kMaxSourceBytes + 1, 's'));
  EXPECT_EQ(seen.Claim(batch).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RetriedBatchesTest, EachSourceRemembersItsLastIdsOnly) {
  RetriedBatches seen;
  const uint64_t n = RetriedBatches::kIdsPerSource;
  for (uint64_t id = 1; id <= n + 1; ++id) ASSERT_TRUE(seen.Claim("a", id));
  // Id 1 left the window when id n + 1 came; 2 .. n + 1 are still in it.
  EXPECT_FALSE(seen.Claim("a", 2));
  EXPECT_FALSE(seen.Claim("a", n + 1));
  EXPECT_TRUE(seen.Claim("a", 1));
}

TEST(RetriedBatchesTest, TheSourceSilentLongestIsForgottenFirst) {
  RetriedBatches seen;
  const size_t n = RetriedBatches::kSources;
  for (size_t s = 0; s < n; ++s) ASSERT_TRUE(seen.Claim("s" + std::to_string(s), 1));
  EXPECT_FALSE(seen.Claim("s0", 1));  // s0 is now the most recent; s1 the oldest
  ASSERT_TRUE(seen.Claim("new", 1));  // one source too many: s1 is forgotten
  EXPECT_FALSE(seen.Claim("s2", 1));
  EXPECT_FALSE(seen.Claim("s0", 1));
  EXPECT_TRUE(seen.Claim("s1", 1));  // new to it again (and s3, now oldest, goes)
}

TEST(RetriedBatchesTest, TheMarkerCarriesTheSourceAndId) {
  v1::EventBatch batch;
  v1::Event marker;
  EXPECT_FALSE(RetriedBatches::Marker(batch, &marker));
  batch.set_batch_id(9);
  batch.add_events()->set_node_id("n");
  ASSERT_TRUE(RetriedBatches::Marker(batch, &marker));
  EXPECT_EQ(marker.node_id(), "n");
  EXPECT_EQ(marker.batch_received().source(), "n");
  EXPECT_EQ(marker.batch_received().batch_id(), 9u);
}

}  // namespace
}  // namespace kvlearn
