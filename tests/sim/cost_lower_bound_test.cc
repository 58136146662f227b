#include "sim/cost_lower_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/workload_generator.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "sim/pool_sweep.h"
#include "tests/support/default_cost.h"
#include "tests/support/hand_trace.h"

namespace kvlearn {
namespace {

double CostOf(const HandTrace& h, std::string_view policy, uint64_t pool_bytes) {
  PoolReplayOptions options;
  options.pool_bytes = pool_bytes;
  auto r = ReplayPool(h.replay, DefaultCost(), policy, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->cost_seconds(1) : 0;
}

// a, b, a with room for one block. Nothing cached: three one-block prefills
// (R each). The one reuse interval, a from request 0 to request 2, takes two
// request steps of a's bytes, which is the whole budget (capacity x 2 steps),
// and saves R less a's load (T). The best policy keeps a and refuses b; it
// pays that and a's admission (T again), so the bound is exactly T under it.
TEST(CostLowerBoundTest, HandWorkedCaseIsTheOptimumLessItsAdmission) {
  const auto h = MakeHandTrace({"a", "b", "a"});
  const CostModel& cost = DefaultCost();
  const double r_s = cost.RecomputeGpuMs(0, kHandBlockSize) / 1000;
  const double t_s = cost.TransferMs(HandBlockBytes()) / 1000;
  const CostLowerBound bound =
      ComputeCostLowerBound(h->replay, cost, HandBlockBytes(), /*eval_start=*/0, 1);
  EXPECT_DOUBLE_EQ(bound.no_cache_cost_seconds, 3 * r_s);
  EXPECT_EQ(bound.intervals, 1u);
  EXPECT_EQ(bound.intervals_kept, 1u);
  EXPECT_NEAR(bound.cost_seconds, 3 * r_s - (r_s - t_s), 1e-12);
  // The optimum, 2R + 2T, is reached by an oracle that refuses b (never used
  // again) and keeps a.
  EXPECT_NEAR(std::min(CostOf(*h, "belady", HandBlockBytes()),
                       CostOf(*h, "oracle-admission", HandBlockBytes())),
              bound.cost_seconds + t_s, 1e-9);
  // No room: nothing can hit, the bound is the no-cache cost.
  EXPECT_DOUBLE_EQ(ComputeCostLowerBound(h->replay, cost, 0, 0, 1).cost_seconds, 3 * r_s);
  // Half the budget: half the interval.
  EXPECT_NEAR(ComputeCostLowerBound(h->replay, cost, HandBlockBytes() / 2, 0, 1).cost_seconds,
              3 * r_s - (r_s - t_s) / 2, 1e-9);
  // Only the last request evaluated: the warm-up's cost is not counted.
  EXPECT_NEAR(ComputeCostLowerBound(h->replay, cost, HandBlockBytes(), 2, 1).cost_seconds, t_s,
              1e-12);
}

// A saving per block that is negative (a load dearer than the recompute it
// spares) is never taken: with transfers weighted up far enough, the bound
// is the no-cache cost whatever the pool.
TEST(CostLowerBoundTest, HitsThatCostMoreThanTheyKeepAreNotCounted) {
  const auto h = MakeHandTrace({"ab", "ab", "ab"});
  const CostModel& cost = DefaultCost();
  const double weight =
      10 * cost.RecomputeGpuMs(0, kHandBlockSize) / cost.TransferMs(HandBlockBytes());
  const CostLowerBound bound =
      ComputeCostLowerBound(h->replay, cost, 2 * HandBlockBytes(), 0, weight);
  EXPECT_EQ(bound.intervals, 0u);
  EXPECT_DOUBLE_EQ(bound.cost_seconds, bound.no_cache_cost_seconds);
}

// The exact optimum of a tiny trace by search over pool contents: the state
// after each request is a prefix-closed set of resident blocks; a request
// hits its longest resident prefix, may admit a leading run of the blocks
// it missed, and evicts anything but its hits, as long as the pool fits.
// Its cost is what ReplayPool charges (ReplayAccounting).
struct TinyTrace {
  Trace trace;
  ReplayTrace replay;
  std::vector<std::vector<int>> chains;  // per request, block numbers root first
  std::vector<uint32_t> parent_mask;     // per block: the bit of its parent (0 at a root)
};

TinyTrace MakeTinyTrace(uint32_t seed, int blocks, int requests) {
  std::mt19937 rng(seed);
  TinyTrace t;
  std::vector<int> parent(blocks, -1), depth(blocks, 0);
  for (int i = 1; i < blocks; ++i) {
    const int p = std::uniform_int_distribution<int>(-1, i - 1)(rng);
    if (p >= 0 && depth[p] < 3) {
      parent[i] = p;
      depth[i] = depth[p] + 1;
    }
  }
  for (int i = 0; i < blocks; ++i) t.parent_mask.push_back(parent[i] < 0 ? 0 : 1u << parent[i]);
  t.trace.source = absl::StrCat("tiny-", seed);
  t.trace.block_size = kHandBlockSize;
  // Reuse comes from a few favourite leaves, as in real prefix traffic.
  std::vector<int> favourites;
  for (int k = 0; k < 3; ++k)
    favourites.push_back(std::uniform_int_distribution<int>(0, blocks - 1)(rng));
  for (int r = 0; r < requests; ++r) {
    int leaf = std::uniform_int_distribution<int>(0, blocks - 1)(rng);
    if (std::bernoulli_distribution(0.5)(rng)) {
      leaf = favourites[std::uniform_int_distribution<int>(0, 2)(rng)];
    }
    std::vector<int> chain;
    for (int b = leaf; b >= 0; b = parent[b]) chain.push_back(b);
    std::reverse(chain.begin(), chain.end());
    std::vector<uint64_t> ids;
    for (const int b : chain) ids.push_back(static_cast<uint64_t>(b) + 1);
    t.trace.Add(int64_t{r} * 1000, static_cast<uint32_t>(chain.size()) * kHandBlockSize, 16, ids);
    t.chains.push_back(chain);
  }
  auto replay = BuildReplayTrace(t.trace, DefaultCost());
  EXPECT_TRUE(replay.ok()) << replay.status();
  t.replay = *std::move(replay);
  return t;
}

double ExactOptimum(const TinyTrace& t, int capacity_blocks, uint32_t eval_start) {
  const CostModel& cost = DefaultCost();
  const uint64_t block_bytes = HandBlockBytes();
  const int blocks = static_cast<int>(t.parent_mask.size());
  const uint32_t states = 1u << blocks;
  const double kInf = std::numeric_limits<double>::infinity();
  auto closed = [&](uint32_t s) {
    for (int b = 0; b < blocks; ++b) {
      if ((s >> b & 1) && t.parent_mask[b] && !(s & t.parent_mask[b])) return false;
    }
    return true;
  };
  std::vector<double> best(states, kInf), next(states);
  best[0] = 0;
  for (size_t r = 0; r < t.chains.size(); ++r) {
    const std::vector<int>& chain = t.chains[r];
    const auto length = static_cast<uint32_t>(chain.size()) * kHandBlockSize;
    std::fill(next.begin(), next.end(), kInf);
    for (uint32_t s = 0; s < states; ++s) {
      if (best[s] == kInf) continue;
      size_t hits = 0;
      while (hits < chain.size() && (s >> chain[hits] & 1)) ++hits;
      uint32_t hit_mask = 0;
      for (size_t i = 0; i < hits; ++i) hit_mask |= 1u << chain[i];
      uint32_t admitted_mask = 0;
      for (size_t admitted = 0; hits + admitted <= chain.size(); ++admitted) {
        if (admitted > 0) admitted_mask |= 1u << chain[hits + admitted - 1];
        double charge = 0;
        if (r >= eval_start) {
          charge = cost.RecomputeGpuMs(hits * kHandBlockSize, length) +
                   cost.TransferMs(hits * block_bytes) + cost.TransferMs(admitted * block_bytes);
        }
        // Keep the hits and the admitted run; any other resident may go.
        const uint32_t optional = s & ~hit_mask;
        for (uint32_t drop = optional;; drop = (drop - 1) & optional) {
          const uint32_t after = (s & ~drop) | admitted_mask;
          if (std::popcount(after) <= capacity_blocks && closed(after)) {
            next[after] = std::min(next[after], best[s] + charge / 1000);
          }
          if (drop == 0) break;
        }
      }
    }
    best.swap(next);
  }
  return *std::min_element(best.begin(), best.end());
}

// On tiny traces whose optimum search can find: bound <= optimum <= every
// policy's cost (the last also checks the search, against the simulator).
// Prints how close the bound and Belady come to the optimum.
TEST(CostLowerBoundTest, NeverAboveTheExactOptimumOfTinyTraces) {
  const CostModel& cost = DefaultCost();
  std::vector<std::string> policies;
  for (const auto name : PolicyNames()) {
    if (!PolicyNeedsModel(name)) policies.emplace_back(name);
  }
  double bound_share = 0, average_share = 0, belady_excess = 0;
  int cases = 0;
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    const TinyTrace t = MakeTinyTrace(seed, /*blocks=*/9, /*requests=*/14);
    for (const int capacity : {1, 2, 4}) {
      for (const uint32_t eval_start : {0u, 5u}) {
        SCOPED_TRACE(
            absl::StrCat(t.trace.source, " capacity ", capacity, " eval from ", eval_start));
        const uint64_t pool = capacity * HandBlockBytes();
        const double optimum = ExactOptimum(t, capacity, eval_start);
        const CostLowerBound bound = ComputeCostLowerBound(t.replay, cost, pool, eval_start, 1);
        EXPECT_LE(bound.cost_seconds, optimum * (1 + 1e-12));
        EXPECT_GE(bound.cost_seconds, bound.average_capacity_cost_seconds * (1 - 1e-12));
        double belady = 0;
        for (const std::string& policy : policies) {
          PoolReplayOptions options;
          options.pool_bytes = pool;
          options.eval_from = eval_start / static_cast<double>(t.chains.size());
          ASSERT_EQ(static_cast<uint32_t>(options.eval_from * t.chains.size()), eval_start);
          auto replayed = ReplayPool(t.replay, cost, policy, options);
          ASSERT_TRUE(replayed.ok()) << replayed.status();
          EXPECT_GE(replayed->cost_seconds(1), optimum * (1 - 1e-12)) << policy;
          if (policy == "belady") belady = replayed->cost_seconds(1);
        }
        if (optimum > 0) {
          bound_share += bound.cost_seconds / optimum;
          average_share += bound.average_capacity_cost_seconds / optimum;
          belady_excess += belady / optimum - 1;
          ++cases;
        }
      }
    }
  }
  ASSERT_GT(cases, 0);
  std::cout << "tiny traces: " << cases << " cases; the bound is " << 100 * bound_share / cases
            << "% of the optimum on average (" << 100 * average_share / cases
            << "% with the capacity held on average only); belady costs "
            << 100 * belady_excess / cases << "% more than the optimum on average\n";
}

// On generated traces, no policy (online, offline, no-cache) ever costs less
// than the bound, at any pool size.
TEST(CostLowerBoundTest, NoPolicyRowIsBelowTheBoundOnGeneratedTraces) {
  const CostModel& cost = DefaultCost();
  std::vector<std::string> policies;
  for (const auto name : PolicyNames()) {
    if (!PolicyNeedsModel(name)) policies.emplace_back(name);
  }
  for (const uint64_t seed : {5u, 9u}) {
    std::vector<Trace> traces;
    traces.push_back(GenerateChatTrace({.seed = seed, .requests = 300}));
    traces.push_back(GenerateRagTrace({.seed = seed, .requests = 300}));
    traces.push_back(GenerateCoderTrace({.seed = seed, .requests = 200}));
    for (const Trace& trace : traces) {
      auto replay = BuildReplayTrace(trace, cost);
      ASSERT_TRUE(replay.ok()) << replay.status();
      for (const double eval_from : {0.0, 0.5}) {
        PoolReplayOptions options;
        options.eval_from = eval_from;
        auto sweep =
            RunPoolSweep(*replay, cost, policies, LogSpacedFractions(0.005, 1, 5), options);
        ASSERT_TRUE(sweep.ok()) << sweep.status();
        const auto eval_start = static_cast<uint32_t>(eval_from * trace.requests.size());
        for (const SweepPoint& point : sweep->points) {
          const CostLowerBound bound =
              ComputeCostLowerBound(*replay, cost, point.pool_bytes, eval_start, 1);
          for (size_t k = 0; k < policies.size(); ++k) {
            EXPECT_GE(point.results[k].cost_seconds(1), bound.cost_seconds * (1 - 1e-12))
                << trace.source << ' ' << policies[k] << " at pool fraction " << point.pool_fraction
                << " eval from " << eval_from;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvlearn
