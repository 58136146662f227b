// Invariants of the bursty generators (fan-out, batch, mixed): determinism,
// everything the Mooncake reader checks, and the burst shape each one promises.
#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "tests/support/same_trace.h"
#include "tests/support/well_formed_trace.h"

namespace kvlearn {
namespace {

// Largest number of requests sharing their first `blocks` ids that arrive
// within `window_ms` of the first of them.
uint32_t LargestBurst(const Trace& trace, uint32_t blocks, int64_t window_ms) {
  std::unordered_map<uint64_t, std::vector<int64_t>> arrivals;  // key: id of block blocks-1
  for (const TraceRequest& r : trace.requests) {
    if (r.num_blocks <= blocks) continue;
    arrivals[trace.BlocksOf(r)[blocks - 1]].push_back(r.timestamp_ms);
  }
  uint32_t best = 0;
  for (const auto& [key, times] : arrivals) {
    size_t lo = 0;
    for (size_t hi = 0; hi < times.size(); ++hi) {
      while (times[hi] - times[lo] > window_ms) ++lo;
      best = std::max<uint32_t>(best, static_cast<uint32_t>(hi - lo + 1));
    }
  }
  return best;
}

FanoutWorkloadOptions SmallFanout(uint64_t seed = 1) {
  FanoutWorkloadOptions o;
  o.seed = seed;
  o.requests = 3000;
  return o;
}

BatchWorkloadOptions SmallBatch(uint64_t seed = 1) {
  BatchWorkloadOptions o;
  o.seed = seed;
  o.requests = 3000;
  return o;
}

TEST(FanoutWorkloadTest, DefaultsValidBadOptionsRefused) {
  EXPECT_TRUE(ValidateFanoutWorkloadOptions({}).ok());
  FanoutWorkloadOptions o;
  o.mean_fanout = 0.5;
  EXPECT_FALSE(ValidateFanoutWorkloadOptions(o).ok());
  o = {};
  o.agents_per_second = 0;
  EXPECT_FALSE(ValidateFanoutWorkloadOptions(o).ok());
  o = {};
  o.fork_window_s = -1;
  EXPECT_FALSE(ValidateFanoutWorkloadOptions(o).ok());
  o = {};
  o.block_size = 0;
  EXPECT_FALSE(ValidateFanoutWorkloadOptions(o).ok());
}

TEST(FanoutWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  EXPECT_TRUE(SameTrace(GenerateFanoutTrace(SmallFanout(3)), GenerateFanoutTrace(SmallFanout(3))));
  EXPECT_FALSE(SameTrace(GenerateFanoutTrace(SmallFanout(3)), GenerateFanoutTrace(SmallFanout(4))));
}

TEST(FanoutWorkloadTest, WellFormed) {
  FanoutWorkloadOptions o = SmallFanout();
  ExpectWellFormed(GenerateFanoutTrace(o), o.requests, o.max_input_tokens);
  o.block_size = 100;  // odd size, so partial blocks are common
  o.max_input_tokens = 20000;
  ExpectWellFormed(GenerateFanoutTrace(o), o.requests, o.max_input_tokens);
}

// A round's sub-agents share the agent's whole context (system prompt ~8
// blocks + task context ~23 blocks at the defaults) and arrive within the fork
// window; 20 blocks reach past any system prompt into the agent's own context.
TEST(FanoutWorkloadTest, SubAgentsShareALongPrefixWithinTheForkWindow) {
  const FanoutWorkloadOptions o = SmallFanout();
  const Trace trace = GenerateFanoutTrace(o);
  EXPECT_GE(LargestBurst(trace, 20, 2000), 16u);
  // Without fan-out no burst is larger than what chance overlap gives.
  FanoutWorkloadOptions single = o;
  single.mean_fanout = 1;
  single.mean_rounds = 1;
  EXPECT_LE(LargestBurst(GenerateFanoutTrace(single), 20, 2000), 1u);
}

TEST(FanoutWorkloadTest, LaterRoundsExtendTheContext) {
  FanoutWorkloadOptions o = SmallFanout();
  o.mean_rounds = 4;
  o.system_prompts = 1;
  const Trace trace = GenerateFanoutTrace(o);
  // Some request's chain must extend, block for block, a shorter chain's full
  // blocks that belong to an earlier round: count distinct prefix depths per root.
  std::unordered_map<uint64_t, uint32_t> longest_shared;  // first context id -> blocks
  std::unordered_map<uint64_t, int> uses;
  for (uint64_t id : trace.hash_ids) ++uses[id];
  size_t deep = 0;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    uint32_t shared = 0;
    while (shared < ids.size() && uses[ids[shared]] > 1) ++shared;
    deep += shared * o.block_size > o.system_prompt_median_tokens + o.context_median_tokens;
  }
  EXPECT_GT(deep, trace.requests.size() / 4);
}

TEST(BatchWorkloadTest, DefaultsValidBadOptionsRefused) {
  EXPECT_TRUE(ValidateBatchWorkloadOptions({}).ok());
  BatchWorkloadOptions o;
  o.mean_documents = 0;
  EXPECT_FALSE(ValidateBatchWorkloadOptions(o).ok());
  o = {};
  o.job_requests_per_second = 0;
  EXPECT_FALSE(ValidateBatchWorkloadOptions(o).ok());
  o = {};
  o.instructions = 0;
  EXPECT_FALSE(ValidateBatchWorkloadOptions(o).ok());
}

TEST(BatchWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  EXPECT_TRUE(SameTrace(GenerateBatchTrace(SmallBatch(5)), GenerateBatchTrace(SmallBatch(5))));
  EXPECT_FALSE(SameTrace(GenerateBatchTrace(SmallBatch(5)), GenerateBatchTrace(SmallBatch(6))));
}

TEST(BatchWorkloadTest, WellFormed) {
  BatchWorkloadOptions o = SmallBatch();
  ExpectWellFormed(GenerateBatchTrace(o), o.requests, o.max_input_tokens);
  o.block_size = 64;
  ExpectWellFormed(GenerateBatchTrace(o), o.requests, o.max_input_tokens);
}

// Every request is an instruction (full blocks shared) + a fresh document: the
// blocks after the instruction are used once, and a job's requests come in a
// dense burst (20/s at the defaults: dozens within a second).
TEST(BatchWorkloadTest, InstructionSharedDocumentFresh) {
  const Trace trace = GenerateBatchTrace(SmallBatch());
  std::unordered_map<uint64_t, int> uses;
  for (uint64_t id : trace.hash_ids) ++uses[id];
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    EXPECT_EQ(uses[ids.back()], 1);  // the document's tail is fresh
    // Shared blocks form a prefix: nothing shared after the first fresh block.
    size_t k = 0;
    while (k < ids.size() && uses[ids[k]] > 1) ++k;
    for (size_t j = k; j < ids.size(); ++j) ASSERT_EQ(uses[ids[j]], 1);
  }
  EXPECT_GE(LargestBurst(trace, 8, 1000), 10u);
}

TEST(MixedWorkloadTest, MergesTheThreeKindsInTimeOrder) {
  MixedWorkloadOptions o;
  o.requests = 4000;
  ASSERT_TRUE(ValidateMixedWorkloadOptions(o).ok());
  const Trace trace = GenerateMixedTrace(o);
  ExpectWellFormed(trace, 4000, 131072);
  const Trace again = GenerateMixedTrace(o);
  EXPECT_TRUE(SameTrace(trace, again));
  o.batch_share = -1;
  EXPECT_FALSE(ValidateMixedWorkloadOptions(o).ok());
  o.batch_share = o.chat_share = o.fanout_share = 0;
  EXPECT_FALSE(ValidateMixedWorkloadOptions(o).ok());
}

}  // namespace
}  // namespace kvlearn
