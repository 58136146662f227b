// Invariants of the coder generator: determinism, everything the Mooncake
// reader checks, that consecutive turns of a session share all but their last
// few blocks (as many as the edit depth says), and the mean prompt length
// the defaults stand for.
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "tests/support/common_prefix_blocks.h"
#include "tests/support/same_trace.h"
#include "tests/support/well_formed_trace.h"

namespace kvlearn {
namespace {

CoderWorkloadOptions Small(uint64_t seed = 1) {
  CoderWorkloadOptions o;
  o.seed = seed;
  o.requests = 3000;
  return o;
}

TEST(CoderWorkloadTest, DefaultsValidBadOptionsRefused) {
  EXPECT_TRUE(ValidateCoderWorkloadOptions({}).ok());
  CoderWorkloadOptions o;
  o.mean_edit_blocks = 0.5;
  EXPECT_FALSE(ValidateCoderWorkloadOptions(o).ok());
  o = {};
  o.repositories = 0;
  EXPECT_FALSE(ValidateCoderWorkloadOptions(o).ok());
  o = {};
  o.mean_turns = 0;
  EXPECT_FALSE(ValidateCoderWorkloadOptions(o).ok());
  o = {};
  o.growth_median_tokens = 0;
  EXPECT_FALSE(ValidateCoderWorkloadOptions(o).ok());
}

TEST(CoderWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  EXPECT_TRUE(SameTrace(GenerateCoderTrace(Small(5)), GenerateCoderTrace(Small(5))));
  EXPECT_FALSE(SameTrace(GenerateCoderTrace(Small(5)), GenerateCoderTrace(Small(6))));
}

TEST(CoderWorkloadTest, WellFormed) {
  CoderWorkloadOptions o = Small();
  ExpectWellFormed(GenerateCoderTrace(o), o.requests, o.max_input_tokens);
  o.block_size = 100;          // odd size, so partial blocks are common
  o.max_input_tokens = 40000;  // sessions often run out of context
  ExpectWellFormed(GenerateCoderTrace(o), o.requests, o.max_input_tokens);
}

struct TurnPairs {
  size_t pairs = 0;
  double mean_unshared = 0;  // mean over pairs of (previous turn's blocks - shared blocks)
};

// With one repository, block s (just past the repository's full blocks, which
// every request starts with) is the session's own, so it names the session;
// a request whose block s an earlier request had is that session's next turn.
// For each such pair, checks that the turn keeps a prefix of the previous
// one ending at least one full block before its end, continues with a block
// never seen before, and is longer; with `exact_edit` (edit depth 1) that it
// keeps every full block but the last.
TurnPairs CheckConsecutiveTurns(const Trace& trace, bool exact_edit) {
  const size_t s = CommonPrefixBlocks(trace);
  std::unordered_map<uint64_t, size_t> last_turn;  // block s -> latest request
  std::unordered_set<uint64_t> seen;
  TurnPairs out;
  double unshared = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    const auto ids = trace.BlocksOf(r);
    if (ids.size() > s) {
      if (auto it = last_turn.find(ids[s]); it != last_turn.end()) {
        const TraceRequest& prev = trace.requests[it->second];
        const auto prev_ids = trace.BlocksOf(prev);
        size_t shared = 0;
        while (shared < prev_ids.size() && shared < ids.size() && ids[shared] == prev_ids[shared]) {
          ++shared;
        }
        const size_t full = prev.input_length / trace.block_size;
        EXPECT_LT(shared, full) << "request " << i;
        EXPECT_GT(r.input_length, prev.input_length) << "request " << i;
        EXPECT_EQ(seen.count(ids[shared]), 0u) << "request " << i;
        if (exact_edit) {
          EXPECT_EQ(shared + 1, full) << "request " << i;
        }
        unshared += static_cast<double>(prev_ids.size() - shared);
        ++out.pairs;
      }
      last_turn[ids[s]] = i;
    }
    seen.insert(ids.begin(), ids.end());
  }
  out.mean_unshared = unshared / static_cast<double>(out.pairs);
  return out;
}

// A turn re-writes E full blocks (geometric, mean `mean_edit_blocks`) of the
// previous prompt, and its partial last block (present unless the prompt is
// a whole number of blocks, 1 time in 512). So consecutive turns differ in
// their last E + 1 blocks: 3 on average at the default mean of 2. Sessions
// run 8 turns on average, so 7/8 of the requests are follow-ups.
TEST(CoderWorkloadTest, ConsecutiveTurnsShareAllButTheirLastFewBlocks) {
  CoderWorkloadOptions o = Small();
  o.repositories = 1;
  const Trace trace = GenerateCoderTrace(o);
  const TurnPairs turns = CheckConsecutiveTurns(trace, false);
  EXPECT_GT(turns.pairs, trace.requests.size() * 3 / 4);
  EXPECT_GT(turns.mean_unshared, o.mean_edit_blocks + 1 - 0.25);
  EXPECT_LT(turns.mean_unshared, o.mean_edit_blocks + 1 + 0.25);

  o.mean_edit_blocks = 1;  // every turn re-writes exactly the last full block
  CheckConsecutiveTurns(GenerateCoderTrace(o), true);
}

// Mean prompt at the defaults: repository 16000 e^(0.3^2/2) = 16,700 tokens,
// file context 8000 e^(0.7^2/2) = 10,200, and a turn adds 400 e^(1/2) = 660.
// With geometric turns of mean m = 8, a request is on average turn
// E[N(N-1)/2] / E[N] = (m - 1) = 7 past the first, so the mean prompt is
// 26,900 + 7 x 660 = 31,500 tokens, 61.5 blocks, plus half a partial block
// (sessions that run out of context, rare at these lengths, only lower it).
// The repositories' lengths are drawn per seed and the popular ones weigh
// most, so the band is +-20%; checked on several seeds.
TEST(CoderWorkloadTest, MeanPromptFollowsTheParameters) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    const Trace trace = GenerateCoderTrace(Small(seed));
    const double mean_blocks =
        static_cast<double>(trace.hash_ids.size()) / static_cast<double>(trace.requests.size());
    EXPECT_GT(mean_blocks, 62.0 * 0.8) << "seed " << seed;
    EXPECT_LT(mean_blocks, 62.0 * 1.2) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kvlearn
