#include "sim/trace_sample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "datasets/workload_generator.h"
#include "sim/pool_sweep.h"
#include "sim/sampled_sweep.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

// Requests that read each block id, over a whole trace.
absl::flat_hash_map<uint64_t, uint32_t> ReadsPerBlock(const Trace& trace) {
  absl::flat_hash_map<uint64_t, uint32_t> reads;
  for (const uint64_t id : trace.hash_ids) ++reads[id];
  return reads;
}

// Three conversations behind one shared block 1: {1,10}, {1,10,11},
// {1,20}, {1,30}. At popular_uses 4 and rate 1 block 1 (4 reads) is shared,
// the rest are not: keys are 10, 10, 20, 30.
Trace HandTrace() {
  Trace t;
  t.block_size = 4;
  t.Add(0, 8, 1, std::vector<uint64_t>{1, 10});
  t.Add(1, 12, 1, std::vector<uint64_t>{1, 10, 11});
  t.Add(2, 8, 1, std::vector<uint64_t>{1, 20});
  t.Add(3, 6, 1, std::vector<uint64_t>{1, 30});
  return t;
}

TEST(TraceSampleTest, RateOneKeepsEverythingAndMapsPoolsToThemselves) {
  const Trace full = HandTrace();
  const TraceSample s = SampleTrace(full, {.rate = 1, .popular_uses = 4});
  EXPECT_EQ(s.shared_threshold, 4u);
  EXPECT_EQ(s.shared_blocks, 1u);
  EXPECT_EQ(s.full_distinct_tokens, 4u + 4 + 4 + 4 + 2);  // blocks 1, 10, 11, 20, 30
  EXPECT_EQ(s.shared_tokens, 4u);
  ASSERT_EQ(s.warmup_requests, 0u);  // nothing is scaled, so nothing is warmed
  EXPECT_EQ(s.trace.hash_ids, full.hash_ids);
  ASSERT_EQ(s.trace.requests.size(), 4u);
  EXPECT_DOUBLE_EQ(s.byte_rate(), 1.0);
  const SampleScale scale = ScaleOfSample(full, s, DefaultCost(), 0);
  EXPECT_DOUBLE_EQ(scale.cost_rate, 1.0);
  for (const uint64_t q : {0ull, 1ull, 1000ull, 123456789ull}) {
    EXPECT_EQ(scale.SampledPoolBytes(q), q);
  }
}

TEST(TraceSampleTest, WarmupRequestsReadTheSharedChainsFirst) {
  const Trace full = HandTrace();
  // Threshold ceil(3.99 / 0.999) = 4: block 1 is shared; no key of this salt
  // hashes into the top 0.1%, so every request is kept, after one warm-up.
  const TraceSample s = SampleTrace(full, {.rate = 0.999, .popular_uses = 3.99});
  EXPECT_EQ(s.shared_threshold, 4u);
  ASSERT_EQ(s.warmup_requests, 1u);
  ASSERT_EQ(s.trace.requests.size(), 5u);
  EXPECT_EQ(s.trace.requests[0].input_length, 4u);  // block 1's tokens
  EXPECT_EQ(s.trace.requests[0].timestamp_ms, full.requests[0].timestamp_ms);
  std::vector<uint64_t> expected = {1};
  expected.insert(expected.end(), full.hash_ids.begin(), full.hash_ids.end());
  EXPECT_EQ(s.trace.hash_ids, expected);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.trace.requests[i + 1].input_length, full.requests[i].input_length);
  }
  // The warm-up only warms; the evaluated requests start at the first kept
  // one, or at eval_from of the kept ones.
  EXPECT_EQ(static_cast<size_t>(SampleEvalFrom(s, 0) * 5), 1u);
  EXPECT_EQ(static_cast<size_t>(SampleEvalFrom(s, 0.5) * 5), 3u);
}

TEST(TraceSampleTest, SampledPoolKeepsSharedBytesWholeAndScalesTheRest) {
  SampleScale scale;
  scale.shared_bytes = 100;
  scale.byte_rate = 0.25;
  EXPECT_EQ(scale.SampledPoolBytes(60), 60u);           // all of it shared
  EXPECT_EQ(scale.SampledPoolBytes(500), 100u + 100u);  // 100 + 0.25 x 400
  EXPECT_EQ(scale.SampledPoolBytes(100), 100u);
}

// The property the key is chosen for: every block read by fewer requests than
// the threshold keeps all of its reads or none, whatever the salt.
TEST(TraceSampleTest, UnsharedBlocksKeepAllTheirReadsOrNone) {
  std::vector<Trace> traces;
  traces.push_back(GenerateChatTrace({.seed = 21, .requests = 3000}));
  traces.push_back(GenerateFanoutTrace({.seed = 21, .requests = 3000}));
  traces.push_back(GenerateCoderTrace({.seed = 21, .requests = 1500}));
  for (const Trace& full : traces) {
    const auto full_reads = ReadsPerBlock(full);
    for (const uint64_t salt : {0u, 1u, 2u}) {
      const TraceSample s = SampleTrace(full, {.rate = 0.1, .salt = salt, .popular_uses = 4});
      EXPECT_FALSE(s.trace.requests.empty());
      EXPECT_LT(s.trace.requests.size(), full.requests.size());
      uint64_t unshared_tokens_seen = 0;
      absl::flat_hash_map<uint64_t, bool> counted;
      for (const auto& [id, reads] : ReadsPerBlock(s.trace)) {
        const uint32_t in_full = full_reads.at(id);
        if (in_full < s.shared_threshold) {
          EXPECT_EQ(reads, in_full) << full.source << " block " << id << " salt " << salt;
        }
      }
      for (const TraceRequest& r : s.trace.requests) {
        for (uint32_t i = 0; i < r.num_blocks; ++i) {
          const uint64_t id = s.trace.BlocksOf(r)[i];
          if (full_reads.at(id) < s.shared_threshold && !counted[id]) {
            counted[id] = true;
            unshared_tokens_seen += s.trace.TokensOfBlock(r, i);
          }
        }
      }
      EXPECT_EQ(unshared_tokens_seen, s.sampled_unshared_tokens);
    }
  }
}

// Replays `policies` at `fractions` of `full`, whole and sampled at `rate`,
// and checks the issue's bound on the sampled curve: within 2 points of hit
// ratio and 3% of cost of the full run, at every pool and policy.
void ExpectSampleWithinBound(const Trace& full, double rate, std::span<const double> fractions) {
  constexpr double kHitPoints = 0.02;
  constexpr double kCostShare = 0.03;
  const std::vector<std::string> policies = {"lru", "gdsf", "s3fifo", "belady"};
  const CostModel& cost = DefaultCost();
  auto full_replay = BuildReplayTrace(full, cost);
  ASSERT_TRUE(full_replay.ok()) << full_replay.status();
  auto whole = RunPoolSweep(*full_replay, cost, policies, fractions, {});
  ASSERT_TRUE(whole.ok()) << whole.status();

  const TraceSample sample = SampleTrace(full, {.rate = rate});
  const SampleScale scale = ScaleOfSample(full, sample, cost, 0);
  EXPECT_EQ(scale.full_distinct_bytes, full_replay->distinct_block_bytes);
  auto sample_replay = BuildReplayTrace(sample.trace, cost);
  ASSERT_TRUE(sample_replay.ok()) << sample_replay.status();
  PoolReplayOptions sampled_options;
  sampled_options.eval_from = SampleEvalFrom(sample, 0);
  auto sampled = RunPoolSweepAt(*sample_replay, cost, policies, SampledPools(scale, fractions),
                                sampled_options);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  ScaleSweepToFull(scale, *sampled);

  for (size_t p = 0; p < fractions.size(); ++p) {
    EXPECT_EQ(sampled->points[p].pool_bytes, whole->points[p].pool_bytes);
    for (size_t k = 0; k < policies.size(); ++k) {
      const ReplayResult& a = whole->points[p].results[k];
      const ReplayResult& b = sampled->points[p].results[k];
      const std::string where =
          full.source + " " + policies[k] + " at pool fraction " + std::to_string(fractions[p]);
      EXPECT_NEAR(b.block_hit_ratio(), a.block_hit_ratio(), kHitPoints) << where;
      EXPECT_NEAR(b.token_hit_ratio(), a.token_hit_ratio(), kHitPoints) << where;
      EXPECT_NEAR(b.cost_seconds(1), a.cost_seconds(1), kCostShare * a.cost_seconds(1)) << where;
    }
  }
}

constexpr double kFractions[] = {0.01, 0.05, 0.2, 1.0};

// The issue's bound (2 points, 3%) at rate 0.3 on chat and fan-out traces of
// 60,000 requests. Kinds whose reuse needs a larger sample are in
// docs/planning.md with their errors.
TEST(SampledSweepTest, WithinTheIssuesBoundOnGeneratedTraces) {
  constexpr uint64_t kSeed = 41;
  constexpr uint32_t kRequests = 60000;
  ExpectSampleWithinBound(GenerateChatTrace({.seed = kSeed, .requests = kRequests}), 0.3,
                          kFractions);
  ExpectSampleWithinBound(GenerateFanoutTrace({.seed = kSeed, .requests = kRequests}), 0.3,
                          kFractions);
}

}  // namespace
}  // namespace kvlearn
