#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "tests/support/common_prefix_blocks.h"
#include "tests/support/same_trace.h"

namespace kvlearn {
namespace {

ChatWorkloadOptions Small(uint64_t seed = 1) {
  ChatWorkloadOptions o;
  o.seed = seed;
  o.requests = 5000;
  return o;
}

// Number of leading blocks of each request already seen in earlier requests.
// Because an id stands for its whole prefix, that is the shared prefix length.
std::vector<uint32_t> SharedPrefixBlocks(const Trace& trace) {
  std::unordered_set<uint64_t> seen;
  std::vector<uint32_t> shared;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    uint32_t k = 0;
    while (k < ids.size() && seen.count(ids[k])) ++k;
    shared.push_back(k);
    seen.insert(ids.begin(), ids.end());
  }
  return shared;
}

TEST(ChatWorkloadTest, DefaultOptionsAreValid) {
  EXPECT_TRUE(ValidateChatWorkloadOptions(ChatWorkloadOptions{}).ok());
}

TEST(ChatWorkloadTest, RejectsBadOptions) {
  ChatWorkloadOptions o;
  o.block_size = 0;
  EXPECT_FALSE(ValidateChatWorkloadOptions(o).ok());
  o = {};
  o.mean_turns = 0.5;
  EXPECT_FALSE(ValidateChatWorkloadOptions(o).ok());
  o = {};
  o.sessions_per_second = 0;
  EXPECT_FALSE(ValidateChatWorkloadOptions(o).ok());
  o = {};
  o.system_prompts = 0;
  EXPECT_FALSE(ValidateChatWorkloadOptions(o).ok());
  o = {};
  o.output_sigma = -1;
  EXPECT_FALSE(ValidateChatWorkloadOptions(o).ok());
}

TEST(ChatWorkloadTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  const Trace a = GenerateChatTrace(Small(7));
  const Trace b = GenerateChatTrace(Small(7));
  const Trace c = GenerateChatTrace(Small(8));
  EXPECT_TRUE(SameTrace(a, b));
  EXPECT_FALSE(SameTrace(a, c));
}

TEST(ChatWorkloadTest, HasRequestedSizeAndSortedTimestamps) {
  const Trace trace = GenerateChatTrace(Small());
  ASSERT_EQ(trace.requests.size(), 5000u);
  EXPECT_EQ(trace.block_size, 512u);
  EXPECT_EQ(trace.requests.front().timestamp_ms, 0);
  for (size_t i = 1; i < trace.requests.size(); ++i) {
    ASSERT_LE(trace.requests[i - 1].timestamp_ms, trace.requests[i].timestamp_ms) << i;
  }
  EXPECT_GT(trace.requests.back().timestamp_ms, 0);
}

TEST(ChatWorkloadTest, IdsPerRequestMatchInputLength) {
  ChatWorkloadOptions o = Small();
  o.block_size = 100;  // odd size, so partial blocks are common
  const Trace trace = GenerateChatTrace(o);
  for (const TraceRequest& r : trace.requests) {
    ASSERT_GT(r.input_length, 0u);
    ASSERT_LE(r.input_length, o.max_input_tokens);
    ASSERT_EQ(r.num_blocks, BlocksForTokens(r.input_length, 100));
  }
}

TEST(ChatWorkloadTest, EveryIdAlwaysHasTheSameParent) {
  const Trace trace = GenerateChatTrace(Small());
  constexpr uint64_t kRoot = UINT64_MAX;  // parent of a chain's first block
  std::unordered_map<uint64_t, uint64_t> parent;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t p = i == 0 ? kRoot : ids[i - 1];
      const auto [it, inserted] = parent.emplace(ids[i], p);
      ASSERT_EQ(it->second, p) << "id " << ids[i] << " in request at " << r.timestamp_ms;
    }
  }
}

TEST(ChatWorkloadTest, PartialLastBlockIsNeverReused) {
  const Trace trace = GenerateChatTrace(Small());
  std::unordered_map<uint64_t, int> uses;
  for (uint64_t id : trace.hash_ids) ++uses[id];
  for (const TraceRequest& r : trace.requests) {
    if (r.input_length % trace.block_size == 0) continue;
    EXPECT_EQ(uses[trace.BlocksOf(r).back()], 1) << "request at " << r.timestamp_ms;
  }
}

// With one system prompt, block `s` (just past the shared full blocks of the
// system prompt) is fresh in each conversation's first turn, so it identifies the
// conversation. Each later turn must keep exactly the previous turn's full blocks.
TEST(ChatWorkloadTest, FollowUpTurnKeepsEveryFullBlockOfThePreviousTurn) {
  ChatWorkloadOptions o = Small();
  o.system_prompts = 1;
  o.mean_turns = 4;
  const Trace trace = GenerateChatTrace(o);

  // s = blocks every request shares = the system prompt's full blocks.
  const size_t s = CommonPrefixBlocks(trace);

  std::unordered_map<uint64_t, size_t> last_turn;  // block s id -> latest request index
  size_t follow_ups = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    const auto ids = trace.BlocksOf(r);
    if (ids.size() <= s) continue;
    if (auto it = last_turn.find(ids[s]); it != last_turn.end()) {
      const TraceRequest& prev = trace.requests[it->second];
      const auto prev_ids = trace.BlocksOf(prev);
      const size_t full = prev.input_length / trace.block_size;
      ASSERT_GT(r.input_length, prev.input_length);
      for (size_t b = 0; b < full; ++b) {
        ASSERT_EQ(ids[b], prev_ids[b]) << "request " << i;
      }
      if (full < prev_ids.size()) {
        EXPECT_NE(ids[full], prev_ids[full]) << "request " << i;
      }
      ++follow_ups;
    }
    last_turn[ids[s]] = i;
  }
  // Mean 4 turns: about three quarters of requests are follow-ups.
  EXPECT_GT(follow_ups, trace.requests.size() / 2);
}

TEST(ChatWorkloadTest, ConversationsShareLongPrefixes) {
  const Trace trace = GenerateChatTrace(Small());
  const std::vector<uint32_t> shared = SharedPrefixBlocks(trace);
  size_t long_shares = 0;
  for (uint32_t k : shared) long_shares += k >= 8;
  // Default mean 2 turns: roughly half the requests continue a conversation and
  // reuse its history; system prompts alone are ~4 blocks.
  EXPECT_GT(long_shares, trace.requests.size() / 5);
}

TEST(ChatWorkloadTest, SingleTurnConversationsShareOnlySystemPrompts) {
  ChatWorkloadOptions o = Small();
  o.mean_turns = 1;
  const Trace trace = GenerateChatTrace(o);
  std::unordered_map<uint64_t, int> uses;
  for (uint64_t id : trace.hash_ids) ++uses[id];
  size_t reused = 0;
  for (const auto& [id, n] : uses) reused += n > 1;
  // Only system prompts' full blocks repeat: 8 prompts of a few blocks each.
  EXPECT_GT(reused, 0u);
  EXPECT_LT(reused, 8u * 16);
}

TEST(ChatWorkloadTest, LengthsResembleMooncakeConversations) {
  const Trace trace = GenerateChatTrace(Small());
  double input = 0, output = 0;
  for (const TraceRequest& r : trace.requests) {
    input += r.input_length;
    output += r.output_length;
  }
  input /= trace.requests.size();
  output /= trace.requests.size();
  EXPECT_GT(input, 5000);
  EXPECT_LT(input, 15000);
  EXPECT_GT(output, 200);
  EXPECT_LT(output, 500);
}

TEST(ChatWorkloadTest, WrittenTraceReadsBack) {
  const Trace trace = GenerateChatTrace(Small());
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     ("kvlearn_chat_" + std::to_string(getpid()) + ".jsonl");
  ASSERT_TRUE(WriteMooncakeTrace(trace, path.string()).ok());
  const absl::StatusOr<Trace> read = ReadMooncakeTrace(path.string(), {});
  std::filesystem::remove(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->skipped_lines, 0u);
  EXPECT_TRUE(SameTrace(trace, *read));
}

}  // namespace
}  // namespace kvlearn
