// The traffic summary and drift (models/traffic_summary.h,
// models/traffic_drift.h) on hand-built requests whose numbers are derived by
// hand, and its sampled reuse ratio against an exact count.
#include "models/traffic_summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "datasets/workload_generator.h"
#include "models/traffic_drift.h"

namespace kvlearn {
namespace {

struct HandRequest {
  double arrival_s;
  std::vector<uint64_t> ids;
};

// Arrivals 0, 2, 4, 6 s; prompts abc, abd, e, abcf (letters as ids).
const std::vector<HandRequest>& Hand() {
  static const auto* r = new std::vector<HandRequest>{
      {0, {'a', 'b', 'c'}}, {2, {'a', 'b', 'd'}}, {4, {'e'}}, {6, {'a', 'b', 'c', 'f'}}};
  return *r;
}

TEST(TrafficSummaryTest, HandBuiltRequests) {
  TrafficSummarizer s(512);
  for (const HandRequest& r : Hand()) s.Add(r.arrival_s, r.ids);
  const TrafficSummary t = s.Summary();
  EXPECT_EQ(t.requests, 4u);
  // 3 gaps over 6 s.
  EXPECT_DOUBLE_EQ(t.request_rate_per_s, 0.5);
  // (3 + 3 + 1 + 4) / 4 blocks.
  EXPECT_DOUBLE_EQ(t.mean_prompt_blocks, 2.75);
  // 11 accesses; seen before: a, b of the 2nd, a, b, c of the 4th.
  EXPECT_DOUBLE_EQ(t.block_reuse_ratio, 5.0 / 11.0);
  EXPECT_EQ(t.block_size_tokens, 512u);
  EXPECT_EQ(s.sampled_share(), 1.0);
}

TEST(TrafficSummaryTest, WarmUpRequestsCountOnlyAsSeenBlocks) {
  TrafficSummarizer s(256);
  bool first = true;
  for (const HandRequest& r : Hand()) {
    s.Add(r.arrival_s, r.ids, /*counted=*/!first);
    first = false;
  }
  const TrafficSummary t = s.Summary();
  EXPECT_EQ(t.requests, 3u);
  EXPECT_DOUBLE_EQ(t.request_rate_per_s, 2.0 / 4.0);  // arrivals 2, 4, 6
  EXPECT_DOUBLE_EQ(t.mean_prompt_blocks, 8.0 / 3.0);
  // 8 counted accesses; a, b of the 2nd were seen in the warm-up, then a, b, c.
  EXPECT_DOUBLE_EQ(t.block_reuse_ratio, 5.0 / 8.0);
  EXPECT_EQ(t.block_size_tokens, 256u);
}

TEST(TrafficSummaryTest, ArrivalOrderDoesNotChangeTheRate) {
  // Nodes' clocks interleave: the rate reads the span, not the order.
  TrafficSummarizer s(512);
  for (const double t : {4.0, 0.0, 6.0, 2.0}) s.Add(t, std::vector<uint64_t>{1});
  EXPECT_DOUBLE_EQ(s.Summary().request_rate_per_s, 0.5);
  TrafficSummarizer one(512);
  one.Add(3, std::vector<uint64_t>{1});
  one.Add(3, std::vector<uint64_t>{2});
  EXPECT_EQ(one.Summary().request_rate_per_s, 0);  // no span to divide by
}

TEST(TrafficSummaryTest, SampledReuseStaysNearTheExactCount) {
  ChatWorkloadOptions g;
  g.seed = 5;
  g.requests = 3000;
  const Trace trace = GenerateChatTrace(g);
  absl::flat_hash_set<uint64_t> seen;
  uint64_t accesses = 0, reuses = 0;
  TrafficSummarizer exact(512), sampled(512, /*max_tracked_blocks=*/2048);
  for (const TraceRequest& r : trace.requests) {
    for (const uint64_t id : trace.BlocksOf(r)) {
      ++accesses;
      reuses += !seen.insert(id).second;
    }
    exact.Add(r.timestamp_ms / 1000.0, trace.BlocksOf(r));
    sampled.Add(r.timestamp_ms / 1000.0, trace.BlocksOf(r));
  }
  ASSERT_GT(seen.size(), 4 * 2048u) << "the trace must overflow the sample several times";
  const double truth = static_cast<double>(reuses) / accesses;
  EXPECT_DOUBLE_EQ(exact.Summary().block_reuse_ratio, truth);
  EXPECT_LE(sampled.sampled_share(), 0.25);
  // Still about 2048 blocks and their accesses: a few standard errors of a
  // share estimated on thousands of accesses are a few hundredths.
  EXPECT_NEAR(sampled.Summary().block_reuse_ratio, truth, 0.05);
  // Counts and times are exact whatever is sampled.
  EXPECT_EQ(sampled.Summary().requests, exact.Summary().requests);
  EXPECT_DOUBLE_EQ(sampled.Summary().mean_prompt_blocks, exact.Summary().mean_prompt_blocks);
  EXPECT_DOUBLE_EQ(sampled.Summary().request_rate_per_s, exact.Summary().request_rate_per_s);
}

TrafficSummary Summary(double rate, double blocks, double reuse, uint32_t block_size) {
  TrafficSummary s;
  s.requests = 100;
  s.request_rate_per_s = rate;
  s.mean_prompt_blocks = blocks;
  s.block_reuse_ratio = reuse;
  s.block_size_tokens = block_size;
  return s;
}

TEST(TrafficDriftTest, RatiosAndWhatIsOff) {
  const TrafficDrift d = CompareTraffic(Summary(1.0, 10, 0.25, 512), Summary(0.4, 8, 0.5, 512));
  EXPECT_EQ(d.quantities[0].name, "request_rate");
  EXPECT_DOUBLE_EQ(d.quantities[0].ratio, 2.5);
  EXPECT_TRUE(d.quantities[0].off);  // beyond x2
  EXPECT_DOUBLE_EQ(d.quantities[1].ratio, 1.25);
  EXPECT_FALSE(d.quantities[1].off);
  EXPECT_DOUBLE_EQ(d.quantities[2].ratio, 0.5);
  EXPECT_FALSE(d.quantities[2].off);  // exactly half is within a factor 2
  EXPECT_DOUBLE_EQ(d.quantities[3].ratio, 1);
  EXPECT_FALSE(d.quantities[3].off);
  EXPECT_TRUE(d.any_off());
  EXPECT_EQ(OffText(d), "request_rate x2.50");
}

TEST(TrafficDriftTest, AnotherBlockSizeIsAlwaysOff) {
  // 256 against 512 is within a factor 2, but a model's features count blocks.
  const TrafficDrift d = CompareTraffic(Summary(1, 8, 0.5, 256), Summary(1, 8, 0.5, 512));
  EXPECT_DOUBLE_EQ(d.quantities[3].ratio, 0.5);
  EXPECT_TRUE(d.quantities[3].off);
  EXPECT_FALSE(d.quantities[0].off || d.quantities[1].off || d.quantities[2].off);
}

TEST(TrafficDriftTest, ZerosInTheTrainingSummary) {
  const TrafficDrift same = CompareTraffic(Summary(0, 8, 0, 512), Summary(0, 8, 0, 512));
  EXPECT_EQ(same.quantities[0].ratio, 1);
  EXPECT_FALSE(same.any_off());
  const TrafficDrift d = CompareTraffic(Summary(1, 8, 0.2, 512), Summary(0, 8, 0, 512));
  EXPECT_EQ(d.quantities[0].ratio, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(d.quantities[0].off);
  EXPECT_TRUE(d.quantities[2].off);
}

}  // namespace
}  // namespace kvlearn
