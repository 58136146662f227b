// The learned policy as a follower of full-pool experts (policies/learned_policy.h):
// its experts are priced as the replay prices cost_seconds, the real pool
// pays its leader's cost once it holds what the leader holds, the pool stays
// sound under forced switches, each expert's deficit and surplus (what a
// switch is expected to refill) are kept exactly, a model that says "never
// reused" cannot make it cost much more than the cheaper of lru and gdsf (it
// did before: learned-model alone is the old policy, and the test shows it
// failing), without a model it follows gdsf in time on rag traffic, and a
// losing model's expert is left for a heuristic at once (the fallback).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/splitmix64.h"
#include "datasets/workload_generator.h"
#include "features/feature_schema.h"
#include "gtest/gtest.h"
#include "policies/learned_policy.h"
#include "policies/policy_driver.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"
#include "tests/support/stand_in_model.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

// A model whose every curve is 0: no block is ever used again.
std::shared_ptr<const LearnedModel> NeverAgainModel() {
  return std::make_shared<StandInModel>("never", [](std::span<const float>, std::span<float> out) {
    std::fill(out.begin(), out.end(), 0.0f);
  });
}

// A model that says only blocks never accessed before come back: frequency
// turned upside down.
std::shared_ptr<const LearnedModel> UpsideDownModel() {
  return std::make_shared<StandInModel>(
      "upside-down", [](std::span<const float> x, std::span<float> out) {
        std::fill(out.begin(), out.end(), x[kAccessesLog] < 0.5f ? 1.0f : 0.0f);
      });
}

Trace ChatTrace(uint64_t seed, uint32_t requests) {
  ChatWorkloadOptions g;
  g.seed = seed;
  g.requests = requests;
  return GenerateChatTrace(g);
}

// What one request cost in the replay's own terms (sim/replay_accounting.h),
// computed from its outcome with the cost model, not by the policy.
double ChargedMs(const ReplayTrace& replay, uint32_t ri, const RequestOutcome& o) {
  const CostModel& cost = DefaultCost();
  const TraceRequest& r = replay.trace->requests[ri];
  return cost.RecomputeGpuMs(o.hit_tokens, r.input_length) + cost.TransferMs(o.loaded_bytes) +
         cost.TransferMs(o.admitted_bytes);
}

// cost_seconds of `policy` replayed alone with the pool at `fraction` of the
// trace's distinct bytes, judged on the last 20% as the robustness grid is.
double JudgedCostSeconds(const ReplayTrace& replay, double fraction, std::string_view policy,
                         std::shared_ptr<const LearnedModel> model = nullptr) {
  PoolReplayOptions o;
  o.pool_bytes = static_cast<uint64_t>(fraction * replay.distinct_block_bytes);
  o.eval_from = 0.8;
  o.model = std::move(model);
  auto r = ReplayPool(replay, DefaultCost(), policy, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->cost_seconds(1) : 0.0;
}

LearnedPolicy& Follower(PolicyDriver& driver) {
  return dynamic_cast<LearnedPolicy&>(driver.policy());
}

// Every block `leader` holds, `real` holds too.
bool HoldsAllOf(const PoolState& real, const PoolState& leader, size_t blocks) {
  for (BlockIndex b = 0; b < blocks; ++b) {
    if (leader.IsResident(b) && !real.IsResident(b)) return false;
  }
  return true;
}

// Two implementations of one price: each expert's own sum of its requests'
// prices, and the replay's cost_seconds for that policy run alone.
TEST(LearnedFollowerTest, EachExpertIsPricedAsTheReplayChargesItsPolicy) {
  const Trace trace = ChatTrace(3, 1500);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  const uint64_t pool_bytes = replay->distinct_block_bytes / 10;
  PolicyDriver driver(&replay->catalog, pool_bytes);
  ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost(), MakeTestModel())).ok());
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    RequestOutcome o;
    ASSERT_TRUE(ServeRequest(*replay, ri, driver, o).ok());
  }
  const LearnedPolicy& learned = Follower(driver);
  ASSERT_EQ(learned.num_experts(), 3u);
  for (size_t e = 0; e < learned.num_experts(); ++e) {
    const std::string& name = learned.expert(e).name();
    SCOPED_TRACE(name);
    PoolReplayOptions alone;
    alone.pool_bytes = pool_bytes;
    if (PolicyUsesModel(name)) alone.model = MakeTestModel();
    auto r = ReplayPool(*replay, DefaultCost(), name, alone);
    ASSERT_TRUE(r.ok()) << r.status();
    const double replay_ms = r->cost_seconds(1) * 1000;
    EXPECT_GT(replay_ms, 0);
    EXPECT_NEAR(learned.total_cost_ms(e), replay_ms, 1e-9 * replay_ms);
  }
}

// Hand-worked, pool of two blocks: a block used again and again among
// one-off blocks. gdsf keeps it (its frequency lifts its value above the
// inflation); lru loses it to every two new blocks. Led by gdsf from the
// first request, the real pool holds exactly gdsf's blocks after every
// request and pays gdsf's price for each, and gdsf stays the leader
// (lru is never cheaper).
//   gdsf, cost per byte k: a a a -> a (H 3k); b (k); c evicts b (L = k);
//   a hits (H = k + 4k); d evicts c; e evicts d; a hits; f, g likewise.
TEST(LearnedFollowerTest, FollowingGdsfTheRealPoolIsGdsfsPoolAndPaysItsCost) {
  const auto h = MakeHandTrace({"a", "a", "a", "b", "c", "a", "d", "e", "a", "f", "g", "a"});
  PolicyDriver driver(&h->replay.catalog, 2 * HandBlockBytes());
  ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost())).ok());
  LearnedPolicy& learned = Follower(driver);
  ASSERT_TRUE(learned.SwitchTo("gdsf").ok());
  const size_t gdsf = learned.leader();
  ASSERT_EQ(learned.expert(0).name(), "lru");
  const double block_ms = h->replay.catalog[h->Block('a')].recompute_gpu_ms;
  std::vector<std::string> real, expert, lru_pools, lru_gaps;  // gaps: lru's deficit, surplus
  for (uint32_t ri = 0; ri < h->trace.requests.size(); ++ri) {
    const double before = learned.total_cost_ms(gdsf);
    RequestOutcome o;
    ASSERT_TRUE(ServeRequest(h->replay, ri, driver, o).ok());
    EXPECT_NEAR(ChargedMs(h->replay, ri, o), learned.total_cost_ms(gdsf) - before, 1e-9)
        << "request " << ri;
    real.push_back(h->Resident(driver.pool()));
    expert.push_back(h->Resident(learned.expert(gdsf).pool()));
    lru_pools.push_back(h->Resident(learned.expert(0).pool()));
    lru_gaps.push_back(absl::StrCat(std::lround(learned.deficit_ms(0) / block_ms),
                                    std::lround(learned.surplus_ms(0) / block_ms)));
  }
  EXPECT_EQ(real, expert);
  EXPECT_EQ(real.back(), "ag");
  // lru's pools by hand, after requests 5 to 12: bc ac ad de ae af fg ag.
  // After 5, 8 and 11 it lacks one block the real pool (gdsf's) holds and
  // holds one it lacks: a deficit and a surplus of one block's refill each
  // (every block here is a root of equal recompute), so a switch to it would
  // be expected to refill nothing net; otherwise the pools are equal.
  EXPECT_EQ(lru_pools, (std::vector<std::string>{"a", "a", "a", "ab", "bc", "ac", "ad", "de", "ae",
                                                 "af", "fg", "ag"}));
  EXPECT_EQ(lru_gaps, (std::vector<std::string>{"00", "00", "00", "00", "11", "00", "00", "11",
                                                "00", "00", "11", "00"}));
  EXPECT_EQ(learned.leader(), gdsf);
  EXPECT_EQ(learned.switches(), 1u);                                 // the forced one
  EXPECT_GT(learned.total_cost_ms(0), learned.total_cost_ms(gdsf));  // lru lost a
}

// Random traces with a switch forced at random requests, three experts (the
// model's too): the real pool never exceeds its capacity, never holds an
// orphan; whenever it held every block its leader held as a request began
// (and the leader did not change in that request) it still does afterwards
// and paid at most the leader's price for that request (more hits, fewer
// admissions, never the reverse).
TEST(LearnedFollowerTest, ForcedSwitchesKeepThePoolSoundAndTheLeadersCostABound) {
  for (const uint64_t seed : {5, 6}) {
    SCOPED_TRACE(seed);
    const Trace trace = ChatTrace(seed, 1200);
    auto replay = BuildReplayTrace(trace, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    PolicyDriver driver(&replay->catalog, replay->distinct_block_bytes / 20);
    ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost(), MakeTestModel())).ok());
    LearnedPolicy& learned = Follower(driver);
    const PoolState& pool = driver.pool();
    const size_t n = replay->catalog.size();
    uint64_t state = seed;
    uint32_t covered = 0;
    for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
      if (SplitMix64(state) % 10 == 0) {
        const size_t e = SplitMix64(state) % learned.num_experts();
        ASSERT_TRUE(learned.SwitchTo(learned.expert(e).name()).ok());
      }
      const size_t leader = learned.leader();
      const bool superset = HoldsAllOf(pool, learned.expert(leader).pool(), n);
      const double before = learned.total_cost_ms(leader);
      RequestOutcome o;
      ASSERT_TRUE(ServeRequest(*replay, ri, driver, o).ok());
      ASSERT_LE(pool.used_bytes(), pool.capacity_bytes()) << "request " << ri;
      for (BlockIndex b = 0; b < n; ++b) {
        const BlockIndex parent = replay->catalog[b].parent;
        ASSERT_FALSE(pool.IsResident(b) && parent != kNoBlock && !pool.IsResident(parent))
            << "orphan after request " << ri;
      }
      if (!superset || learned.leader() != leader) continue;
      ++covered;
      EXPECT_TRUE(HoldsAllOf(pool, learned.expert(leader).pool(), n)) << "request " << ri;
      const double leader_ms = learned.total_cost_ms(leader) - before;
      EXPECT_LE(ChargedMs(*replay, ri, o), leader_ms + 1e-9 * leader_ms) << "request " << ri;
    }
    EXPECT_GT(learned.switches(), 50u);
    // A forced switch (one request in ten) leaves the real pool short of the
    // new leader's blocks until they are refilled; a good share of requests
    // still begin as a superset, so the checks above ran.
    EXPECT_GT(covered, trace.requests.size() / 4);
  }
}

// Two implementations of each expert's deficit and surplus (what a switch
// is expected to refill): kept up block by block as the pools change, and
// summed from their definition over every block after each request.
TEST(LearnedFollowerTest, DeficitsAndSurplusesKeptAsPoolsChangeEqualTheirDefinition) {
  const Trace trace = ChatTrace(7, 1200);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  PolicyDriver driver(&replay->catalog, replay->distinct_block_bytes / 20);
  ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost(), MakeTestModel())).ok());
  const LearnedPolicy& learned = Follower(driver);
  const PoolState& pool = driver.pool();
  double largest = 0;  // the largest deficit seen: the checks compared something
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    RequestOutcome o;
    ASSERT_TRUE(ServeRequest(*replay, ri, driver, o).ok());
    for (size_t e = 0; e < learned.num_experts(); ++e) {
      const PoolState& expert = learned.expert(e).pool();
      double deficit = 0, surplus = 0;
      for (BlockIndex b = 0; b < replay->catalog.size(); ++b) {
        const double refill = replay->catalog[b].recompute_gpu_ms;
        if (expert.IsResident(b) && !pool.IsResident(b)) deficit += refill;
        if (pool.IsResident(b) && !expert.IsResident(b)) surplus += refill;
      }
      ASSERT_NEAR(learned.deficit_ms(e), deficit, 1e-6 * (1 + deficit))
          << learned.expert(e).name() << ", request " << ri;
      ASSERT_NEAR(learned.surplus_ms(e), surplus, 1e-6 * (1 + surplus))
          << learned.expert(e).name() << ", request " << ri;
      largest = std::max(largest, deficit);
    }
  }
  EXPECT_GT(largest, 0);
}

// Models without signal: one that says no block is ever used again, and one
// that says only blocks never accessed before come back (frequency turned
// upside down). On generated mixed traces (chat, fan-out and batch) at three
// pool sizes, judged on the last 20% as the grid is, learned-model alone
// (the model-driven policy, which was `learned`) costs more than 0.5% over
// lru in at least one cell; learned, following experts, stays within 1% of
// the cheaper of lru and gdsf and 0.5% of lru in every cell.
TEST(LearnedFollowerTest, AModelWithoutSignalCannotMakeLearnedCostMoreThanTheHeuristics) {
  const std::shared_ptr<const LearnedModel> models[] = {NeverAgainModel(), UpsideDownModel()};
  int model_alone_over = 0;
  for (const uint64_t seed : {21, 22}) {
    MixedWorkloadOptions g;
    g.seed = seed;
    g.requests = 10000;
    const Trace trace = GenerateMixedTrace(g);
    auto replay = BuildReplayTrace(trace, DefaultCost());
    ASSERT_TRUE(replay.ok()) << replay.status();
    for (const double fraction : {0.05, 0.1, 0.2}) {
      const auto cost = [&](std::string_view policy, std::shared_ptr<const LearnedModel> model) {
        return JudgedCostSeconds(*replay, fraction, policy, std::move(model));
      };
      const double lru = cost("lru", nullptr), gdsf = cost("gdsf", nullptr);
      for (const auto& model : models) {
        SCOPED_TRACE(testing::Message()
                     << "seed " << seed << ", pool " << fraction << ", model " << model->version());
        const double learned = cost("learned", model);
        EXPECT_LE(learned, 1.01 * std::min(lru, gdsf));
        EXPECT_LE(learned, 1.005 * lru);
        if (cost("learned-model", model) > 1.005 * lru) ++model_alone_over;
      }
    }
  }
  // The bound is the follower's doing: the model alone breaks it.
  EXPECT_GT(model_alone_over, 0);
}

// Without a model, on rag traffic, where gdsf keeps the popular documents and
// is cheaper than lru by more than the 1% the bound allows at pool 0.2: the
// follower must switch to gdsf in time. Counting a switch's refill as the
// new leader's whole deficit kept it with lru through this run (+1.3% over
// gdsf at 0.2: the real pool still hits the old leader's blocks while it
// refills, so the net refill was a tenth of that).
TEST(LearnedFollowerTest, WithoutAModelOnRagTrafficLearnedSwitchesToGdsfInTime) {
  RagWorkloadOptions g;
  g.seed = 302;
  g.requests = 20000;
  const Trace trace = GenerateRagTrace(g);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (const double fraction : {0.05, 0.1, 0.2}) {
    SCOPED_TRACE(testing::Message() << "pool " << fraction);
    const double lru = JudgedCostSeconds(*replay, fraction, "lru");
    const double gdsf = JudgedCostSeconds(*replay, fraction, "gdsf");
    const double learned = JudgedCostSeconds(*replay, fraction, "learned");
    EXPECT_GT(lru, 1.01 * gdsf);  // staying with lru would break the bound
    EXPECT_LE(learned, 1.01 * gdsf);
    EXPECT_LE(learned, 1.005 * lru);
  }
}

// The fallback: the upside-down model, made to lead from the first request
// on mixed traffic (every pool empty, so that switch expects no refill).
// While its expert leads, the real pool's decayed cost never exceeds the
// cheaper heuristic's by more than one mean request (the ordinary margin,
// which grows with the heuristic's deficit, would let it lead longer); then
// a heuristic leads, and the model, which never wins back what that stretch
// lost, never leads again.
TEST(LearnedFollowerTest, FallbackLeavesALosingModelAtOnce) {
  MixedWorkloadOptions g;
  g.seed = 21;
  g.requests = 6000;
  const Trace trace = GenerateMixedTrace(g);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  PolicyDriver driver(&replay->catalog, replay->distinct_block_bytes / 20);
  ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost(), UpsideDownModel())).ok());
  LearnedPolicy& learned = Follower(driver);
  ASSERT_TRUE(learned.SwitchTo("learned-model").ok());
  const size_t model = learned.leader();
  ASSERT_GE(model, LearnedPolicy::kHeuristicExperts);
  bool led = true;  // the model's expert, so far
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    RequestOutcome o;
    ASSERT_TRUE(ServeRequest(*replay, ri, driver, o).ok());
    if (!led) {
      ASSERT_NE(learned.leader(), model) << "request " << ri;
      continue;
    }
    if (learned.leader() == model) {
      const double heuristic = std::min(learned.decayed_cost_ms(0), learned.decayed_cost_ms(1));
      const double mean_request = learned.real_decayed_ms() / learned.decayed_requests();
      ASSERT_LE(learned.real_decayed_ms() - heuristic, mean_request) << "request " << ri;
      continue;
    }
    led = false;
    EXPECT_EQ(learned.fallbacks(), 1u) << "the model's expert left by the fallback, request " << ri;
  }
  EXPECT_FALSE(led);
}

}  // namespace
}  // namespace kvlearn

namespace kvlearn {
namespace {

// The recent-loss rule: a leader other than lru never goes on leading while
// its cost over the short window exceeds lru's by more than the refill back
// to lru (at most lru's deficit less its surplus) plus one recent mean
// request. On a trace whose traffic shifts, gdsf forced to lead at the start
// is sent back to lru by the rule, not by the long window.
TEST(LearnedFollowerTest, ALeaderLosingToLruLatelyHandsItBackAtOnce) {
  ShiftWorkloadOptions g;
  g.seed = 22;
  g.requests = 2000;
  const Trace trace = GenerateShiftTrace(g);
  auto replay = BuildReplayTrace(trace, DefaultCost());
  ASSERT_TRUE(replay.ok()) << replay.status();
  PolicyDriver driver(&replay->catalog, replay->distinct_block_bytes / 20);
  ASSERT_TRUE(driver.StartPolicy("learned", MakePolicyEnv(DefaultCost())).ok());
  LearnedPolicy& learned = Follower(driver);
  ASSERT_TRUE(learned.SwitchTo("gdsf").ok());
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    RequestOutcome o;
    ASSERT_TRUE(ServeRequest(*replay, ri, driver, o).ok());
    const size_t e = learned.leader();
    if (e == 0) continue;
    const double excess = learned.recent_cost_ms(e) - learned.recent_cost_ms(0);
    const double refill = std::max(learned.deficit_ms(0) - learned.surplus_ms(0), 0.0);
    const double mean_request = learned.recent_cost_ms(e) / learned.recent_requests();
    ASSERT_LE(excess, refill + mean_request) << "request " << ri;
  }
  EXPECT_GE(learned.recent_returns(), 1u);
}

}  // namespace
}  // namespace kvlearn
