#include "sim/plan_answers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

constexpr char kLru[] = "lru";
constexpr char kNoPool[] = "no-cache";

std::optional<size_t> PolicyIndex(const PoolSweep& sweep, std::string_view name) {
  const auto it = std::find(sweep.policies.begin(), sweep.policies.end(), name);
  if (it == sweep.policies.end()) return std::nullopt;
  return static_cast<size_t>(it - sweep.policies.begin());
}

}  // namespace

absl::StatusOr<PlanAnswers> AnswerPlan(const PoolSweep& sweep, double transfer_weight,
                                       double pool_fraction, double target,
                                       std::optional<double> gpu_hour_price) {
  const std::optional<size_t> lru = PolicyIndex(sweep, kLru);
  const std::optional<size_t> no_pool = PolicyIndex(sweep, kNoPool);
  if (!lru || !no_pool) {
    return absl::InvalidArgumentError(
        "a plan needs the lru and no-cache rows (its reference and its no-pool baseline)");
  }
  if (sweep.points.empty()) return absl::InvalidArgumentError("a plan needs a pool size");
  const auto at = std::find_if(sweep.points.begin(), sweep.points.end(), [&](const SweepPoint& p) {
    return p.pool_fraction == pool_fraction;
  });
  if (at == sweep.points.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sweep has no pool at fraction ", pool_fraction));
  }
  const auto cost = [&](const SweepPoint& p, size_t k) {
    return p.results[k].cost_seconds(transfer_weight);
  };

  PlanAnswers a;
  const SweepPoint& largest = sweep.points.back();
  a.no_pool_cost_seconds = cost(largest, *no_pool);
  a.full_pool_cost_seconds = cost(largest, *lru);
  a.window_seconds = largest.results[*lru].window_seconds();
  a.pool_point = static_cast<size_t>(at - sweep.points.begin());

  if (a.full_pool_saving_seconds() > 0) {
    const double wanted = target * a.full_pool_saving_seconds();
    for (size_t k = 0; k < sweep.policies.size(); ++k) {
      if (k == *no_pool) continue;
      TargetPool t{sweep.policies[k], std::nullopt};
      for (size_t p = 0; p < sweep.points.size() && !t.point; ++p) {
        if (a.no_pool_cost_seconds - cost(sweep.points[p], k) >= wanted) t.point = p;
      }
      a.target_pools.push_back(std::move(t));
    }
  }

  for (size_t k = 0; k < sweep.policies.size(); ++k) {
    if (k == *lru || k == *no_pool) continue;
    PolicySaving s{sweep.policies[k], cost(*at, *lru) - cost(*at, k), std::nullopt, std::nullopt};
    if (a.window_seconds > 0) {
      s.gpu_hours_per_hour = s.cost_seconds_saved / a.window_seconds;
      if (gpu_hour_price) s.money_per_hour = *s.gpu_hours_per_hour * *gpu_hour_price;
    }
    a.savings.push_back(std::move(s));
  }
  return a;
}

}  // namespace kvlearn
