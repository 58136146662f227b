// The questions `kvlearn plan` answers from a pool sweep (sim/pool_sweep.h),
// in what an operator pays (cost_seconds: prefill GPU-seconds + w x transfer
// seconds, docs/cost_model.md):
//
// - How big must the pool be? The full-pool saving is what LRU at the
//   largest swept pool saves over no pool at all (no-cache, which recomputes
//   every token and moves nothing); with the default sweep up to 100% of the
//   trace's distinct-block bytes nothing is ever evicted there, so it is the
//   saving of an infinite pool. For each policy, the smallest swept pool at
//   which its own saving over no pool reaches `target` of the full-pool one.
// - What is a better policy worth at my pool? At the user's pool, each
//   policy's cost saved against LRU per hour of traffic: cost seconds saved
//   over the evaluated window / the window's seconds = GPU-hours saved per
//   hour, and times a GPU-hour price, money per hour.
//
// Plain functions of their input; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/pool_sweep.h"

namespace kvlearn {

struct TargetPool {
  std::string policy;
  std::optional<size_t> point;  // the sweep point reached first; nullopt: none reaches it
};

struct PolicySaving {
  std::string policy;
  double cost_seconds_saved = 0;  // cost_lru - cost_policy over the evaluated window
  // cost_seconds_saved / window seconds; nullopt when the window is empty.
  std::optional<double> gpu_hours_per_hour;
  std::optional<double> money_per_hour;  // gpu_hours_per_hour x price, when a price is given
};

struct PlanAnswers {
  double no_pool_cost_seconds = 0;    // no-cache's cost
  double full_pool_cost_seconds = 0;  // lru's cost at the largest swept pool
  double window_seconds = 0;          // the evaluated window (every row has the same)
  size_t pool_point = 0;              // the sweep point of the user's pool
  // Every policy but no-cache, in the sweep's order; empty when the full
  // pool saves nothing over no pool (then no pool reaches any share of it).
  std::vector<TargetPool> target_pools;
  std::vector<PolicySaving> savings;  // every policy but lru and no-cache at the user's pool

  double full_pool_saving_seconds() const { return no_pool_cost_seconds - full_pool_cost_seconds; }
};

// REQUIRES: the sweep's points in increasing pool order. Fails when the sweep
// lacks an "lru" or a "no-cache" policy, or a point at `pool_fraction`.
// `target` in (0, 1]; `gpu_hour_price` in money per GPU-hour.
absl::StatusOr<PlanAnswers> AnswerPlan(const PoolSweep& sweep, double transfer_weight,
                                       double pool_fraction, double target,
                                       std::optional<double> gpu_hour_price);

}  // namespace kvlearn
