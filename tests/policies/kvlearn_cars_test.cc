// Checks of "kvlearn-cars" beyond the contract every policy keeps
// (policy_contract_test.cc): the threshold controller pushes the right way,
// exploration admits the advertised share of refusals, and the online model
// learns to tell reused blocks from the others.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "core/cost_model.h"
#include "datasets/trace.h"
#include "datasets/workload_generator.h"
#include "gtest/gtest.h"
#include "policies/kvlearn_cars_policy.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

constexpr uint32_t kBlockSize = 512;

// Replays `replay` under a KvlearnCarsPolicy built from `options`; `watch`
// sees the policy after every request.
template <typename Watch>
ReplayResult ReplayCars(const ReplayTrace& replay, uint64_t pool_bytes,
                        const KvlearnCarsOptions& options, Watch watch) {
  PoolReplayOptions o;
  o.pool_bytes = pool_bytes;
  KvlearnCarsPolicy* policy = nullptr;
  o.make_policy = [&](const PolicyEnv& env) -> absl::StatusOr<std::unique_ptr<RetentionPolicy>> {
    auto p = std::make_unique<KvlearnCarsPolicy>(env, options);
    policy = p.get();
    return std::unique_ptr<RetentionPolicy>(std::move(p));
  };
  o.after_request = [&](uint32_t request, const PoolState& pool) { watch(request, *policy, pool); };
  auto result = ReplayPool(replay, DefaultCost(), "kvlearn-cars", o);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : ReplayResult{};
}

// `chains` prompts of `depth` full blocks each, requested round robin every
// `gap_ms`: every block is reused every chains * gap_ms.
Trace RoundRobinTrace(uint32_t chains, uint32_t depth, uint32_t requests, int64_t gap_ms) {
  Trace trace;
  trace.source = "round robin";
  trace.block_size = kBlockSize;
  std::vector<uint64_t> ids(depth);
  for (uint32_t i = 0; i < requests; ++i) {
    const uint32_t c = i % chains;
    for (uint32_t j = 0; j < depth; ++j) ids[j] = uint64_t{c} * 1000 + j + 1;
    trace.Add(int64_t{i} * gap_ms, depth * kBlockSize, 16, ids);
  }
  return trace;
}

// Prompts of `depth` fresh blocks each, never seen again.
Trace OneShotTrace(uint32_t depth, uint32_t requests, int64_t gap_ms) {
  Trace trace;
  trace.source = "one shot";
  trace.block_size = kBlockSize;
  std::vector<uint64_t> ids(depth);
  for (uint32_t i = 0; i < requests; ++i) {
    for (uint32_t j = 0; j < depth; ++j) ids[j] = uint64_t{i} * 1000 + j + 1;
    trace.Add(int64_t{i} * gap_ms, depth * kBlockSize, 16, ids);
  }
  return trace;
}

Trace ChatTrace(uint64_t seed, uint32_t requests) {
  ChatWorkloadOptions o;
  o.seed = seed;
  o.requests = requests;
  return GenerateChatTrace(o);
}

ReplayTrace Prepare(const Trace& trace) {
  auto replay = BuildReplayTrace(trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  return replay.ok() ? *std::move(replay) : ReplayTrace{};
}

TEST(KvlearnCarsTest, ThresholdRisesAndAdmissionsFallWhenThePoolIsOverTarget) {
  // 60 chains of 4 blocks reused every 12 s, a pool for 40% of them: every
  // resident block is live, so occupancy sits above the 0.85 target.
  const Trace trace = RoundRobinTrace(60, 4, 6000, 200);
  const ReplayTrace replay = Prepare(trace);
  const uint64_t pool_bytes = replay.distinct_block_bytes * 2 / 5;
  const uint32_t n = static_cast<uint32_t>(trace.requests.size());

  // Sampled once the pool is full, at 1/3 and at the end.
  double theta_full = NAN, theta_third = NAN, theta_end = NAN;
  KvlearnCarsPolicy::Counters at_full, at_third, at_end;
  double min_occupancy_after_full = 1;
  bool full = false;
  ReplayCars(replay, pool_bytes, {},
             [&](uint32_t request, const KvlearnCarsPolicy& p, const PoolState& pool) {
               if (!full && pool.free_bytes() < replay.catalog[0].bytes) {
                 full = true;
                 theta_full = p.theta_scaled();
                 at_full = p.counters();
               }
               if (full) {
                 min_occupancy_after_full =
                     std::min(min_occupancy_after_full, p.ControlledOccupancy());
               }
               if (request == n / 3) {
                 theta_third = p.theta_scaled();
                 at_third = p.counters();
               }
               if (request == n - 1) {
                 theta_end = p.theta_scaled();
                 at_end = p.counters();
               }
             });
  ASSERT_TRUE(full);
  EXPECT_GT(min_occupancy_after_full, 0.85);
  EXPECT_GT(theta_full, 0);  // the proportional term alone
  EXPECT_GT(theta_end, theta_full);
  const auto admit_share = [](const KvlearnCarsPolicy::Counters& from,
                              const KvlearnCarsPolicy::Counters& to) {
    return static_cast<double>(to.rule_admits - from.rule_admits) /
           static_cast<double>(to.decisions - from.decisions);
  };
  std::cout << "theta at full " << theta_full << ", at 1/3 " << theta_third << ", at end "
            << theta_end << "; rule admits per decision " << admit_share(at_full, at_third)
            << " then " << admit_share(at_third, at_end) << "\n";
  EXPECT_GT(theta_end, theta_third);
  EXPECT_LT(admit_share(at_third, at_end), admit_share(at_full, at_third));
}

TEST(KvlearnCarsTest, ThresholdFallsWhenThePoolIsUnderTarget) {
  // Nothing is reused and the pool holds everything: blocks older than H
  // stop counting, so live occupancy stays near H / trace length.
  const Trace trace = OneShotTrace(4, 1200, 1000);
  const ReplayTrace replay = Prepare(trace);
  double max_occupancy = 0;
  double theta_end = NAN;
  ReplayCars(replay, replay.distinct_block_bytes, {},
             [&](uint32_t, const KvlearnCarsPolicy& p, const PoolState&) {
               max_occupancy = std::max(max_occupancy, p.ControlledOccupancy());
               theta_end = p.theta_scaled();
             });
  EXPECT_LT(max_occupancy, 0.85);
  EXPECT_LT(theta_end, 0);
}

TEST(KvlearnCarsTest, ExplorationAdmitsFivePercentOfRefusals) {
  // A threshold pinned at its ceiling refuses (nearly) every block; each
  // refusal is then admitted with probability 0.05, independently.
  const Trace trace = ChatTrace(5, 10000);
  const ReplayTrace replay = Prepare(trace);
  KvlearnCarsOptions options;
  options.kp = 0;
  options.ki_per_second = 0;
  options.initial_integral = options.theta_limit;
  KvlearnCarsPolicy::Counters c;
  ReplayCars(replay, replay.distinct_block_bytes / 10, options,
             [&](uint32_t, const KvlearnCarsPolicy& p, const PoolState&) { c = p.counters(); });
  ASSERT_GT(c.rule_refusals, 5000u);
  EXPECT_EQ(c.decisions, c.rule_admits + c.rule_refusals);
  // Binomial(n, 0.05): five standard deviations either side.
  const double n = static_cast<double>(c.rule_refusals);
  const double sd = std::sqrt(n * 0.05 * 0.95);
  const double explored = static_cast<double>(c.exploration_admits);
  std::cout << c.exploration_admits << " explored of " << c.rule_refusals << " refusals ("
            << c.rule_admits << " rule admits)\n";
  EXPECT_GT(explored, n * 0.05 - 5 * sd);
  EXPECT_LT(explored, n * 0.05 + 5 * sd);
}

TEST(KvlearnCarsTest, OnlineModelSeparatesReusedFromUnusedBlocks) {
  // Each label reports the probability predicted when its window opened,
  // before the outcome was known. Over the second half of a chat trace, the
  // blocks that were then reused within H must have been given clearly higher
  // probabilities than those that were not.
  const Trace trace = ChatTrace(11, 8000);
  const ReplayTrace replay = Prepare(trace);
  const uint32_t half = static_cast<uint32_t>(trace.requests.size() / 2);
  uint32_t current = 0;
  std::vector<std::pair<float, bool>> late;  // (P, reused)
  KvlearnCarsOptions options;
  options.label_observer = [&](BlockIndex, float p, bool reused) {
    if (current >= half) late.emplace_back(p, reused);
  };
  KvlearnCarsPolicy::Counters c;
  ReplayCars(replay, replay.distinct_block_bytes / 10, options,
             [&](uint32_t request, const KvlearnCarsPolicy& p, const PoolState&) {
               current = request + 1;
               c = p.counters();
             });
  ASSERT_GT(c.batches, 100u);
  double pos_sum = 0, neg_sum = 0;
  uint64_t pos = 0, neg = 0;
  for (const auto& [p, reused] : late) {
    (reused ? pos_sum : neg_sum) += p;
    ++(reused ? pos : neg);
  }
  ASSERT_GT(pos, 500u);
  ASSERT_GT(neg, 500u);
  // Area under the ROC curve: the chance a reused block outranks an unused one.
  std::sort(late.begin(), late.end());
  double rank_sum = 0;  // ranks of the positives, ties averaged
  for (size_t i = 0; i < late.size();) {
    size_t j = i;
    uint64_t tied_pos = 0;
    while (j < late.size() && late[j].first == late[i].first) tied_pos += late[j++].second;
    rank_sum += static_cast<double>(tied_pos) * (static_cast<double>(i + j + 1) / 2);
    i = j;
  }
  const double auc = (rank_sum - static_cast<double>(pos) * (static_cast<double>(pos) + 1) / 2) /
                     (static_cast<double>(pos) * static_cast<double>(neg));
  const double mean_pos = pos_sum / static_cast<double>(pos);
  const double mean_neg = neg_sum / static_cast<double>(neg);
  std::cout << pos << " reused, mean P " << mean_pos << "; " << neg << " not, mean P " << mean_neg
            << "; AUC " << auc << "\n";
  EXPECT_GT(mean_pos, mean_neg + 0.1);
  EXPECT_GT(auc, 0.7);
}

}  // namespace
}  // namespace kvlearn
