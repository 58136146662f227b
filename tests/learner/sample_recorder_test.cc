// Labels from the future on hand-made traces, and feature parity between the
// learner's recorder and the learned policy inside the simulator.
#include "learner/sample_recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

// Block 7 is used at t=0, then three requests with other blocks at t=1,2,3 s,
// then block 7 again at t=5 s, then nothing for 100 s.
Trace HandTrace() {
  Trace t;
  t.source = "hand";
  t.block_size = 512;
  t.Add(0, 512, 1, std::vector<uint64_t>{7});
  t.Add(1000, 512, 1, std::vector<uint64_t>{1});
  t.Add(2000, 512, 1, std::vector<uint64_t>{2});
  t.Add(3000, 512, 1, std::vector<uint64_t>{3});
  t.Add(5000, 512, 1, std::vector<uint64_t>{7});
  t.Add(105000, 512, 1, std::vector<uint64_t>{9});
  return t;
}

// HandTrace ends at 105 s; its requests come at 0, 1, 2, 3, 5 and 105 s.
// A horizon is kept when at least 3 of the 6 are followed by that much trace:
// 100 s follows 5 of them, 103 s exactly 3 (t = 0, 1, 2), 104 s only 2.
TEST(SampleRecorderTest, LearnableHorizonsNeedHalfTheTrainingSplitLabelled) {
  const Trace trace = HandTrace();
  const std::vector<double> asked = {100, 103, 104, 500};
  EXPECT_EQ(LearnableHorizons(trace, 6, 6, asked), (std::vector<double>{100, 103}));
  // Training on the first 4 requests (0..3 s): 104 s follows t = 0 and 1, half.
  EXPECT_EQ(LearnableHorizons(trace, 4, 6, asked), (std::vector<double>{100, 103, 104}));
  // Labels that may only look up to request 5 (t = 5 s): 4 s follows t = 0 and 1 of the
  // first 4, 5 s only t = 0.
  EXPECT_EQ(LearnableHorizons(trace, 4, 5, std::vector<double>{4, 5}), (std::vector<double>{4}));
  EXPECT_TRUE(LearnableHorizons(trace, 0, 6, asked).empty());
}

// A Bailian trace's type and turn reach the features of the blocks its
// requests bring (16-token blocks: 20 tokens are 2 blocks, 40 are 3); a block
// a later request only reuses keeps the request that brought it. The
// Mooncake hand trace says neither: its five read 0.
TEST(SampleRecorderTest, BailianTypeAndTurnReachTheFeatures) {
  const std::string jsonl =
      "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 0.0, \"input_length\": 20, "
      "\"output_length\": 4, \"type\": \"search\", \"turn\": 1, \"hash_ids\": [5, 6]}\n"
      "{\"chat_id\": 2, \"parent_chat_id\": 1, \"timestamp\": 1.5, \"input_length\": 40, "
      "\"output_length\": 4, \"type\": \"image\", \"turn\": 2, \"hash_ids\": [5, 6, 7]}\n";
  auto trace = ParseTrace(jsonl, "hand.jsonl", {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->block_size, 16u);
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(*trace, cost);
  ASSERT_TRUE(replay.ok()) << replay.status();
  RecordOptions o;
  o.pool_bytes = 1ull << 40;
  o.horizons_seconds = {1};
  auto s = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  for (size_t i = 0; i < s->size(); ++i) {
    const float* f = &s->features[i * kNumFeatures];
    const bool brought_by_second = replay->catalog[s->block[i]].hash_id == 7;
    SCOPED_TRACE(testing::Message() << "sample " << i);
    EXPECT_FLOAT_EQ(f[kOriginTurnLog], std::log1p(brought_by_second ? 2.0f : 1.0f));
    EXPECT_EQ(f[kOriginText], 0.0f);
    EXPECT_EQ(f[kOriginSearch], brought_by_second ? 0.0f : 1.0f);
    EXPECT_EQ(f[kOriginImage], brought_by_second ? 1.0f : 0.0f);
    EXPECT_EQ(f[kOriginFile], 0.0f);
  }

  const Trace mooncake = HandTrace();
  auto plain = BuildReplayTrace(mooncake, cost);
  ASSERT_TRUE(plain.ok());
  auto unlabelled = RecordSamples(*plain, cost, o);
  ASSERT_TRUE(unlabelled.ok());
  ASSERT_GT(unlabelled->size(), 0u);
  for (size_t i = 0; i < unlabelled->size(); ++i) {
    for (uint32_t k = kOriginTurnLog; k <= kOriginFile; ++k) {
      EXPECT_EQ(unlabelled->features[i * kNumFeatures + k], 0.0f) << kFeatureNames[k];
    }
  }
}

TEST(SampleRecorderTest, LabelsComeFromTheNextUse) {
  const Trace trace = HandTrace();
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  RecordOptions o;
  o.pool_bytes = 1ull << 40;
  o.horizons_seconds = {4, 6, 200};
  auto s = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 6u);  // one sample per block access
  // First use of block 7: next use 5 s and 4 requests later.
  EXPECT_EQ(s->request[0], 0u);
  EXPECT_DOUBLE_EQ(s->next_use_seconds[0], 5.0);
  EXPECT_EQ(s->requests_to_next_use[0], 4u);
  // Within 4 s: no; within 6 s: yes; 200 s: the trace ends 105 s after t=0,
  // so whether the next use falls within 200 s is not known.
  EXPECT_EQ(s->reused[0], 0.0f);
  EXPECT_EQ(s->reused[1], 1.0f);
  EXPECT_EQ(s->known[0], 1);
  EXPECT_EQ(s->known[1], 1);
  EXPECT_EQ(s->known[2], 0);
  // The saving: R - T of a 512-token first block, since it is reused within
  // the longest horizon.
  const BlockMeta& m = replay->catalog[replay->blocks[0]];
  const double t_ms = static_cast<double>(m.bytes) / 25e6;
  EXPECT_NEAR(s->saved_ms[0], m.recompute_gpu_ms - t_ms, 1e-3);
  // Block 1 is never used again: infinite wait, negative labels, no saving.
  EXPECT_TRUE(std::isinf(s->next_use_seconds[1]));
  EXPECT_EQ(s->requests_to_next_use[1], 0u);
  EXPECT_EQ(s->reused[3 * 1 + 1], 0.0f);
  EXPECT_EQ(s->saved_ms[1], 0.0f);
  // Second use of block 7 (request 4, t=5 s): never again; the trace runs
  // 100 s on, so "not within 4 s / 6 s" is known and "within 200 s" is not.
  EXPECT_EQ(s->known[4 * 3 + 0], 1);
  EXPECT_EQ(s->known[4 * 3 + 2], 0);
}

// Recording only the first 5 requests (up to t = 5 s), labels may not look
// past t = 5 s: block 7's next use at 5 s is "within 4 s: no" (known), but
// "within 6 s" is censored although the full trace would answer it.
TEST(SampleRecorderTest, LabelsStopAtTheLastRecordedRequest) {
  RecordOptions o{.pool_bytes = 1ull << 40, .end_request = 5, .horizons_seconds = {4, 6}};
  auto s = RecordSamples(*BuildReplayTrace(HandTrace(), DefaultCost()), DefaultCost(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ(s->known[0], 1);
  EXPECT_EQ(s->reused[0], 0.0f);
  EXPECT_EQ(s->known[1], 0);
}

TEST(SampleRecorderTest, HistoryFeaturesCountTheAccessesSoFar) {
  const Trace trace = HandTrace();
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  RecordOptions o;
  o.pool_bytes = 1ull << 40;
  auto s = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(s.ok());
  // Features are taken after the access is recorded: 1 access, then 2.
  EXPECT_FLOAT_EQ(s->features[0 * kNumFeatures + kAccessesLog], std::log1p(1.0f));
  EXPECT_FLOAT_EQ(s->features[4 * kNumFeatures + kAccessesLog], std::log1p(2.0f));
  // The gap between block 7's two uses is 5 s.
  EXPECT_FLOAT_EQ(s->features[4 * kNumFeatures + kGap1Log], std::log1p(5.0f));
  // Two uses within the last 10 s, one within the last 1 s.
  EXPECT_EQ(s->features[4 * kNumFeatures + kBurst10s], 2.0f);
  EXPECT_EQ(s->features[4 * kNumFeatures + kBurst1s], 1.0f);
}

TEST(SampleRecorderTest, SliceKeepsRowsOfTheRequestRange) {
  const Trace trace = HandTrace();
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  RecordOptions o;
  auto s = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(s.ok());
  const SampleSet mid = s->Slice(1, 4);
  ASSERT_EQ(mid.size(), 3u);
  EXPECT_EQ(mid.request, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(0, std::memcmp(mid.features.data(), s->features.data() + kNumFeatures,
                           3 * kNumFeatures * sizeof(float)));
}

// The learned policy computes features inside the simulator; the recorder
// computes them on its own history, at the same point of each request. Both
// must be the same bits, or a model would be served features it never saw.
TEST(FeatureParityTest, RecorderAndLearnedPolicySeeIdenticalVectors) {
  ChatWorkloadOptions g;
  g.seed = 5;
  g.requests = 3000;
  const Trace trace = GenerateChatTrace(g);
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  std::vector<float> policy_vectors;
  std::vector<uint32_t> policy_blocks;
  RecordOptions o;
  o.policy = "learned-model";
  o.model = MakeTestModel();
  o.pool_bytes = replay->distinct_block_bytes / 20;  // evictions happen
  o.policy_feature_sink = [&](BlockIndex b, uint32_t, std::span<const float> x) {
    policy_blocks.push_back(b);
    policy_vectors.insert(policy_vectors.end(), x.begin(), x.end());
  };
  auto s = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(policy_blocks, s->block);
  ASSERT_EQ(policy_vectors.size(), s->features.size());
  EXPECT_EQ(0, std::memcmp(policy_vectors.data(), s->features.data(),
                           policy_vectors.size() * sizeof(float)));
  // The pool-dependent features did vary, so the comparison covered them.
  float min_occupancy = 1, max_rate = 0;
  for (size_t i = 0; i < s->size(); ++i) {
    min_occupancy = std::min(min_occupancy, s->features[i * kNumFeatures + kPoolOccupancy]);
    max_rate = std::max(max_rate, s->features[i * kNumFeatures + kEvictionRate]);
  }
  EXPECT_LT(min_occupancy, 0.5f);
  EXPECT_GT(max_rate, 0.0f);
}

// --shuffle-labels: every label row survives, on other features, and nothing
// else moves.
TEST(SampleRecorderTest, ShuffleLabelsPermutesLabelRowsAndKeepsFeatures) {
  ChatWorkloadOptions g;
  g.seed = 3;
  g.requests = 400;
  const Trace trace = GenerateChatTrace(g);
  const CostModel cost = DefaultCost();
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  RecordOptions o;
  o.pool_bytes = replay->distinct_block_bytes / 10;
  o.horizons_seconds = {30, 300};
  auto recorded = RecordSamples(*replay, cost, o);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  const SampleSet& before = *recorded;
  ASSERT_GT(before.size(), 1000u);
  SampleSet after = before;
  ShuffleLabels(after, 7);
  EXPECT_EQ(after.features, before.features);
  EXPECT_EQ(after.request, before.request);
  EXPECT_EQ(after.block, before.block);
  // A row's labels as one tuple: the multiset of tuples is unchanged.
  const auto rows = [](const SampleSet& s) {
    std::vector<std::tuple<std::vector<float>, std::vector<uint8_t>, double, uint32_t, float>> r;
    const size_t k = s.num_horizons;
    for (size_t i = 0; i < s.size(); ++i) {
      r.emplace_back(std::vector<float>(s.reused.begin() + i * k, s.reused.begin() + (i + 1) * k),
                     std::vector<uint8_t>(s.known.begin() + i * k, s.known.begin() + (i + 1) * k),
                     s.next_use_seconds[i], s.requests_to_next_use[i], s.saved_ms[i]);
    }
    return r;
  };
  auto a = rows(before), b = rows(after);
  size_t moved = 0;
  for (size_t i = 0; i < a.size(); ++i) moved += a[i] != b[i];
  // Most rows get another row's labels (equal labels can land on each other).
  EXPECT_GT(moved, a.size() / 2);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  // Seeded.
  SampleSet again = before;
  ShuffleLabels(again, 7);
  EXPECT_EQ(again.reused, after.reused);
}

}  // namespace
}  // namespace kvlearn
