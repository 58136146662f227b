// The contract every retention policy keeps, checked for each name in
// PolicyNames() (a new policy joins by adding its factory row): on generated
// prefix-tree traces and a range of pool sizes the pool never overflows,
// never holds an orphan, keeps its bookkeeping exact, hits only what it
// holds, replays deterministically, and never beats the offline oracle.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/cost_model.h"
#include "core/splitmix64.h"
#include "datasets/mooncake_reader.h"
#include "datasets/trace.h"
#include "gtest/gtest.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr uint32_t kBlockSize = 512;

// splitmix64: a fixed, portable sequence (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64(state_); }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

// Random chains sharing prefixes: each request either repeats an earlier
// prompt exactly (so partial last blocks are reused too), extends the full
// blocks of an earlier prompt (recent ones more often, plus a few hot
// "system prompts"), or starts a new root. About half the prompts end in a
// partial block; partial blocks are never extended, so every block id always
// stands for the same tokens.
Trace GeneratePrefixTrace(uint64_t seed, uint32_t requests) {
  struct Prompt {
    std::vector<uint64_t> ids;
    uint32_t input_length = 0;
  };
  Rng rng(seed);
  Trace trace;
  trace.source = "generated prefix tree, seed " + std::to_string(seed);
  trace.block_size = kBlockSize;
  std::vector<Prompt> prompts;
  uint64_t next_id = seed * 1'000'000 + 1;
  for (uint32_t i = 0; i < requests; ++i) {
    Prompt p;
    const uint64_t roll = rng.Below(100);
    if (!prompts.empty() && roll < 15) {
      p = prompts[rng.Below(prompts.size())];
    } else {
      if (!prompts.empty() && roll < 85) {
        const size_t pick =
            roll < 30 ? rng.Below(std::min<size_t>(prompts.size(), 4))
                      : prompts.size() - 1 - rng.Below(std::min<size_t>(prompts.size(), 24));
        const Prompt& base = prompts[pick];
        const uint32_t full = base.input_length / kBlockSize;
        const uint32_t keep = static_cast<uint32_t>(rng.Below(std::min<uint32_t>(full, 16) + 1));
        p.ids.assign(base.ids.begin(), base.ids.begin() + keep);
      }
      const uint32_t extra = 1 + static_cast<uint32_t>(rng.Below(5));
      for (uint32_t j = 0; j < extra; ++j) p.ids.push_back(next_id++);
      const uint32_t tokens = static_cast<uint32_t>(p.ids.size()) * kBlockSize;
      p.input_length = rng.Below(2) == 0 ? tokens : tokens - 1 - rng.Below(kBlockSize - 1);
    }
    trace.Add(int64_t{i} * 250, p.input_length, 64, p.ids);
    prompts.push_back(std::move(p));
  }
  return trace;
}

struct GeneratedTrace {
  uint64_t seed = 0;
  std::unique_ptr<Trace> trace;
  ReplayTrace replay;
};

const std::vector<std::unique_ptr<GeneratedTrace>>& GeneratedTraces() {
  static const auto* traces = [] {
    auto* out = new std::vector<std::unique_ptr<GeneratedTrace>>;
    for (const uint64_t seed : {1, 7, 42}) {
      auto g = std::make_unique<GeneratedTrace>();
      g->seed = seed;
      g->trace = std::make_unique<Trace>(GeneratePrefixTrace(seed, 300));
      auto replay = BuildReplayTrace(*g->trace, DefaultCost());
      if (!replay.ok()) {
        ADD_FAILURE() << replay.status();
        continue;
      }
      g->replay = *std::move(replay);
      out->push_back(std::move(g));
    }
    return out;
  }();
  return *traces;
}

// Pool sizes: room for one full block and a partial one, then 5%, 20% and
// 100% of the trace's distinct bytes.
std::vector<uint64_t> PoolSizes(const ReplayTrace& replay) {
  const uint64_t full_block = DefaultCost().BytesForTokens(kBlockSize);
  return {full_block + full_block / 2, replay.distinct_block_bytes / 20,
          replay.distinct_block_bytes / 5, replay.distinct_block_bytes};
}

std::string Describe(const GeneratedTrace& g, uint64_t pool_bytes) {
  std::ostringstream out;
  out << "seed " << g.seed << ", pool " << pool_bytes << " of " << g.replay.distinct_block_bytes
      << " distinct bytes";
  return out.str();
}

// Recomputes the pool's bookkeeping from scratch by scanning every block.
::testing::AssertionResult PoolIsConsistent(const ReplayTrace& replay, const PoolState& pool) {
  const BlockCatalog& catalog = replay.catalog;
  if (pool.used_bytes() > pool.capacity_bytes()) {
    return ::testing::AssertionFailure()
           << "used " << pool.used_bytes() << " > capacity " << pool.capacity_bytes();
  }
  std::vector<uint32_t> children(catalog.size(), 0);
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  for (BlockIndex b = 0; b < catalog.size(); ++b) {
    if (!pool.IsResident(b)) continue;
    bytes += catalog[b].bytes;
    ++blocks;
    const BlockIndex parent = catalog[b].parent;
    if (parent == kNoBlock) continue;
    if (!pool.IsResident(parent)) {
      return ::testing::AssertionFailure()
             << "block " << catalog[b].hash_id << " is resident but its parent "
             << catalog[parent].hash_id << " is not";
    }
    ++children[parent];
  }
  if (bytes != pool.used_bytes()) {
    return ::testing::AssertionFailure()
           << "used_bytes " << pool.used_bytes() << " but resident blocks hold " << bytes;
  }
  if (blocks != pool.resident_blocks()) {
    return ::testing::AssertionFailure() << "resident_blocks " << pool.resident_blocks() << " but "
                                         << blocks << " blocks are resident";
  }
  for (BlockIndex b = 0; b < catalog.size(); ++b) {
    if (pool.ResidentChildren(b) != children[b]) {
      return ::testing::AssertionFailure()
             << "block " << catalog[b].hash_id << " has " << children[b]
             << " resident children, pool says " << pool.ResidentChildren(b);
    }
  }
  return ::testing::AssertionSuccess();
}

// Policies that score with a model get a fixed in-memory one.
PoolReplayOptions OptionsFor(std::string_view policy, uint64_t pool_bytes) {
  PoolReplayOptions options;
  options.pool_bytes = pool_bytes;
  if (PolicyUsesModel(policy)) options.model = MakeTestModel();
  return options;
}

ReplayResult Replay(const ReplayTrace& replay, std::string_view policy, uint64_t pool_bytes) {
  PoolReplayOptions options = OptionsFor(policy, pool_bytes);
  auto result = ReplayPool(replay, DefaultCost(), policy, options);
  EXPECT_TRUE(result.ok()) << policy << ": " << result.status();
  return result.ok() ? *std::move(result) : ReplayResult{};
}

// Policies that admit every block they are offered. With a pool holding
// everything they miss only first uses. (A policy that may refuse blocks
// stays out of this list; the other checks still apply to it.)
bool AdmitsEverything(std::string_view policy) {
  constexpr std::string_view kAdmitAll[] = {"lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc"};
  return std::find(std::begin(kAdmitAll), std::end(kAdmitAll), policy) != std::end(kAdmitAll);
}

class PolicyContractTest : public ::testing::TestWithParam<std::string_view> {};

TEST_P(PolicyContractTest, PoolStaysWithinCapacityWithoutOrphansAndExactBookkeeping) {
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      PoolReplayOptions options = OptionsFor(GetParam(), pool_bytes);
      bool failed = false;
      options.after_request = [&](uint32_t request, const PoolState& pool) {
        if (failed) return;  // the first broken request is the interesting one
        const auto consistent = PoolIsConsistent(g->replay, pool);
        if (!consistent) {
          failed = true;
          ADD_FAILURE() << "after request " << request << ": " << consistent.message();
        }
      };
      auto result = ReplayPool(g->replay, DefaultCost(), GetParam(), options);
      ASSERT_TRUE(result.ok()) << result.status();
    }
  }
}

TEST_P(PolicyContractTest, HitsOnlyWhatItHolds) {
  for (const auto& g : GeneratedTraces()) {
    const ReplayTrace& replay = g->replay;
    const uint64_t distinct = replay.catalog.size();
    for (const uint64_t pool_bytes : PoolSizes(replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      const ReplayResult r = Replay(replay, GetParam(), pool_bytes);
      EXPECT_EQ(r.block_accesses, replay.block_accesses());
      EXPECT_LE(r.block_hits, r.block_accesses);
      EXPECT_LE(r.hit_tokens, r.prompt_tokens);
      // Every block's first use is a miss, whatever the pool.
      EXPECT_LE(r.block_hits, r.block_accesses - distinct);
      if (pool_bytes == replay.distinct_block_bytes) {
        // Everything fits: nothing is ever evicted, and a policy that keeps
        // every block (or the oracle, which keeps every block used again)
        // misses only first uses.
        EXPECT_EQ(r.evicted_blocks, 0u);
        if (AdmitsEverything(GetParam()) || IsOfflinePolicy(GetParam())) {
          EXPECT_EQ(r.block_hits, r.block_accesses - distinct);
        }
      }
    }
  }
}

TEST_P(PolicyContractTest, ReplayIsDeterministic) {
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      const ReplayResult a = Replay(g->replay, GetParam(), pool_bytes);
      const ReplayResult b = Replay(g->replay, GetParam(), pool_bytes);
      EXPECT_EQ(a.requests, b.requests);
      EXPECT_EQ(a.block_hits, b.block_hits);
      EXPECT_EQ(a.hit_tokens, b.hit_tokens);
      EXPECT_EQ(a.loaded_bytes, b.loaded_bytes);
      EXPECT_EQ(a.admitted_bytes, b.admitted_bytes);
      EXPECT_EQ(a.evicted_blocks, b.evicted_blocks);
      EXPECT_EQ(a.recomputed_tokens, b.recomputed_tokens);
      EXPECT_EQ(a.prefill_gpu_seconds, b.prefill_gpu_seconds);
      EXPECT_EQ(a.ttft_ms.mean, b.ttft_ms.mean);
      EXPECT_EQ(a.ttft_ms.p99, b.ttft_ms.p99);
    }
  }
}

TEST_P(PolicyContractTest, EmptyPoolNeverHits) {
  for (const auto& g : GeneratedTraces()) {
    SCOPED_TRACE(Describe(*g, 0));
    const ReplayResult r = Replay(g->replay, GetParam(), 0);
    EXPECT_EQ(r.block_hits, 0u);
    EXPECT_EQ(r.admitted_bytes, 0u);
  }
}

TEST_P(PolicyContractTest, OracleHitRatioIsAnUpperBound) {
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      const ReplayResult oracle = Replay(g->replay, "belady", pool_bytes);
      const ReplayResult r = Replay(g->replay, GetParam(), pool_bytes);
      EXPECT_GE(oracle.block_hits, r.block_hits) << GetParam() << " beat the oracle";
    }
  }
}

TEST_P(PolicyContractTest, FactoryBuildsItUnderItsName) {
  // The factory row itself: the policy reports its own name, an offline
  // policy refuses to run without the future, and a learned one without a
  // model.
  const auto& g = *GeneratedTraces().front();
  PoolState pool(&g.replay.catalog, g.replay.distinct_block_bytes);
  PolicyEnv env{&g.replay.catalog, &pool, &g.replay.next_use};
  if (PolicyNeedsModel(GetParam())) {
    EXPECT_FALSE(CreatePolicy(GetParam(), env).ok());
  }
  if (PolicyUsesModel(GetParam())) env.model = MakeTestModel();
  auto policy = CreatePolicy(GetParam(), env);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ((*policy)->name(), GetParam());
  env.next_use = nullptr;
  EXPECT_EQ(CreatePolicy(GetParam(), env).ok(), !IsOfflinePolicy(GetParam()));
}

// Starts `policy` in `driver` and drives it over the first half of g's
// requests the way the pool replay does, through the one driver.
absl::Status StartHalfway(const GeneratedTrace& g, std::string_view policy, PolicyDriver& driver) {
  PolicyEnv env = MakePolicyEnv(DefaultCost(), nullptr, &g.replay.next_use);
  if (PolicyUsesModel(policy)) env.model = MakeTestModel();
  if (auto s = driver.StartPolicy(policy, env); !s.ok()) return s;
  const auto half = static_cast<uint32_t>(g.trace->requests.size() / 2);
  for (uint32_t ri = 0; ri < half; ++ri) {
    RequestOutcome outcome;
    if (auto s = ServeRequest(g.replay, ri, driver, outcome); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// For every generated trace and non-empty pool size: starts `policy` there,
// drives it over the first half of the trace and runs `check` on the pool's
// evictable leaves, if it has any. Returns how many cases were checked;
// stops at the first fatal failure, as an ASSERT in the test body would.
template <typename Check>
int ForEachHalfwayPool(std::string_view policy, Check check) {
  int checked = 0;
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      if (pool_bytes == 0) continue;
      SCOPED_TRACE(Describe(*g, pool_bytes));
      PolicyDriver driver(&g->replay.catalog, pool_bytes);
      if (const absl::Status started = StartHalfway(*g, policy, driver); !started.ok()) {
        ADD_FAILURE() << started;
        return checked;
      }
      std::vector<BlockIndex> candidates;
      for (BlockIndex b = 0; b < g->replay.catalog.size(); ++b) {
        if (driver.pool().IsEvictable(b)) candidates.push_back(b);
      }
      if (candidates.empty()) continue;
      check(*g, driver, candidates);
      if (::testing::Test::HasFatalFailure()) return checked;
      ++checked;
    }
  }
  return checked;
}

// RankVictims is what the sidecar answers a node that names its own
// candidates; SelectVictim is what the simulator evicts. They must agree:
// after half a trace, the policy's ranking of every evictable leaf must be
// the order in which repeated SelectVictim calls take those same blocks
// (blocks that become leaves on the way, parents of evicted blocks, may be
// taken in between; they are not candidates and are skipped).
TEST_P(PolicyContractTest, RankVictimsIsTheOrderSelectVictimTakes) {
  const int checked = ForEachHalfwayPool(GetParam(), [](const GeneratedTrace&, PolicyDriver& driver,
                                                        const std::vector<BlockIndex>& candidates) {
    const std::vector<BlockIndex> ranked = driver.RankVictims(candidates);
    ASSERT_EQ(ranked.size(), candidates.size());
    const absl::flat_hash_set<BlockIndex> wanted(candidates.begin(), candidates.end());
    std::vector<BlockIndex> taken;
    while (taken.size() < candidates.size()) {
      auto victim = driver.NextVictim();
      ASSERT_TRUE(victim.ok()) << victim.status();
      if (*victim == kNoBlock) break;
      driver.EvictLeaf(*victim);
      if (wanted.contains(*victim)) taken.push_back(*victim);
    }
    ASSERT_EQ(taken.size(), candidates.size()) << "SelectVictim stopped early";
    const auto first_difference =
        std::mismatch(ranked.begin(), ranked.end(), taken.begin()).first - ranked.begin();
    EXPECT_EQ(first_difference, static_cast<long>(ranked.size()))
        << "RankVictims and SelectVictim part at position " << first_difference << " of "
        << ranked.size();
  });
  if (!IsRecomputeBound(GetParam())) {
    EXPECT_GT(checked, 0) << "no case had an evictable leaf";
  }
}

// FirstVictims, what the sidecar's RankEviction asks, may stop ranking once
// its victims hold the bytes wanted: up to there it must be RankVictims'
// order, and it must still return every candidate once.
TEST_P(PolicyContractTest, FirstVictimsBeginAsRankVictimsDo) {
  const int checked = ForEachHalfwayPool(
      GetParam(),
      [](const GeneratedTrace& g, PolicyDriver& driver, const std::vector<BlockIndex>& candidates) {
        uint64_t total = 0;
        for (const BlockIndex b : candidates) total += g.replay.catalog[b].bytes;
        const std::vector<BlockIndex> ranked = driver.RankVictims(candidates);
        std::vector<BlockIndex> sorted_candidates = candidates;
        std::sort(sorted_candidates.begin(), sorted_candidates.end());
        for (const uint64_t wanted : {uint64_t{1}, total / 4, total / 2, total, UINT64_MAX}) {
          const std::vector<BlockIndex> first = driver.FirstVictims(candidates, wanted);
          std::vector<BlockIndex> sorted_first = first;
          std::sort(sorted_first.begin(), sorted_first.end());
          EXPECT_EQ(sorted_first, sorted_candidates) << "wanted " << wanted;
          uint64_t bytes = 0;
          for (size_t i = 0; i < first.size() && bytes < wanted; ++i) {
            ASSERT_EQ(first[i], ranked[i]) << "position " << i << ", wanted " << wanted;
            bytes += g.replay.catalog[first[i]].bytes;
          }
        }
      });
  if (!IsRecomputeBound(GetParam())) {
    EXPECT_GT(checked, 0) << "no case had an evictable leaf";
  }
}

// A sidecar's in-flight requests may hold many leaves at once (the
// simulators pin one): 40 roots stored a second apart, the 30 oldest held.
// The policy must still name a victim among the other 10, and under lru the
// least recent of them (a scan of the heap's first levels found none once
// the 21 blocks there were all held).
TEST_P(PolicyContractTest, WithManyLeavesHeldAFreeOneIsStillTheVictim) {
  if (IsOfflinePolicy(GetParam()) || IsRecomputeBound(GetParam())) GTEST_SKIP();
  BlockCatalog catalog;
  for (uint64_t id = 1; id <= 40; ++id) {
    catalog.Add({.hash_id = id, .parent = kNoBlock, .depth = 0, .tokens = 16, .bytes = 1 << 20});
  }
  PolicyDriver driver(&catalog, 40 << 20);
  PolicyEnv env = MakePolicyEnv(DefaultCost());
  if (PolicyUsesModel(GetParam())) env.model = MakeTestModel();
  ASSERT_TRUE(driver.StartPolicy(GetParam(), env).ok());
  std::vector<BlockIndex> held;
  for (BlockIndex b = 0; b < 40; ++b) {
    driver.Insert(b, AccessInfo{static_cast<int64_t>(b) * 1000, b, b});
    if (b < 30) held.push_back(b);
  }
  driver.Hold(held);
  const auto victim = driver.NextVictim();
  ASSERT_TRUE(victim.ok()) << victim.status();
  ASSERT_NE(*victim, kNoBlock) << "ten leaves are free";
  EXPECT_GE(*victim, 30u) << "a held block";
  if (GetParam() == "lru") {
    EXPECT_EQ(*victim, 30u);
  }
}

std::string PolicyTestName(const ::testing::TestParamInfo<std::string_view>& info) {
  std::string name(info.param);
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContractTest,
                         ::testing::ValuesIn(PolicyNames().begin(), PolicyNames().end()),
                         PolicyTestName);

TEST(NoCachePolicyTest, NeverHits) {
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      const ReplayResult r = Replay(g->replay, "no-cache", pool_bytes);
      EXPECT_EQ(r.block_hits, 0u);
      EXPECT_EQ(r.admitted_bytes, 0u);
    }
  }
}

// Refusing only blocks that are never used again takes entries out of LRU's
// recency order and adds none, so every block that is used again has at most
// as many bytes above it in that order as under plain LRU and can only be hit
// more often (exact for equal-sized blocks; the smaller partial last blocks
// could in principle break a tie the other way, which these traces do not).
// And each trace ends with computed blocks that are never used again, which
// LRU admits and the oracle refuses.
TEST(OracleAdmissionPolicyTest, HitsAtLeastAsOftenAsLruAndAdmitsLess) {
  for (const auto& g : GeneratedTraces()) {
    for (const uint64_t pool_bytes : PoolSizes(g->replay)) {
      SCOPED_TRACE(Describe(*g, pool_bytes));
      const ReplayResult lru = Replay(g->replay, "lru", pool_bytes);
      const ReplayResult oracle = Replay(g->replay, "oracle-admission", pool_bytes);
      EXPECT_GE(oracle.block_hits, lru.block_hits);
      EXPECT_LT(oracle.admitted_bytes, lru.admitted_bytes);
    }
  }
}

// The shipped Mooncake conversation sample: the oracle has the highest block
// hit ratio of all policies at small pools. Prints the table it compared.
TEST(ShippedTraceTest, OracleHasTheHighestBlockHitRatio) {
  auto trace = ReadMooncakeTrace(KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl",
                                 TraceReadOptions{});
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto replay = BuildReplayTrace(*trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (const double fraction : {0.05, 0.1, 0.2}) {
    SCOPED_TRACE(fraction);
    const auto pool_bytes = static_cast<uint64_t>(fraction * replay->distinct_block_bytes);
    const ReplayResult oracle = Replay(*replay, "belady", pool_bytes);
    std::ostringstream table;
    table << "pool " << fraction << " of distinct bytes:";
    for (const std::string_view name : PolicyNames()) {
      const ReplayResult r = name == "belady" ? oracle : Replay(*replay, name, pool_bytes);
      table << " " << name << "=" << std::fixed << std::setprecision(4) << r.block_hit_ratio();
      EXPECT_GE(oracle.block_hit_ratio(), r.block_hit_ratio()) << name << " beat the oracle";
    }
    std::cout << table.str() << "\n";
  }
}

}  // namespace
}  // namespace kvlearn
