#include "sim/pool_sweep.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "oneapi/tbb/parallel_for.h"

namespace kvlearn {

std::vector<double> LogSpacedFractions(double min_fraction, double max_fraction, uint32_t count) {
  if (count <= 1) return {max_fraction};
  std::vector<double> out(count);
  const double ratio = max_fraction / min_fraction;
  for (uint32_t i = 0; i < count; ++i) {
    out[i] = min_fraction * std::pow(ratio, static_cast<double>(i) / (count - 1));
  }
  // The ends exactly as given, not as pow rounds them.
  out.front() = min_fraction;
  out.back() = max_fraction;
  return out;
}

std::vector<double> WithFraction(std::vector<double> fractions, double fraction) {
  std::erase_if(fractions,
                [fraction](double f) { return std::abs(f - fraction) <= 1e-9 * fraction; });
  fractions.insert(std::lower_bound(fractions.begin(), fractions.end(), fraction), fraction);
  return fractions;
}

absl::StatusOr<PoolSweep> RunPoolSweep(const ReplayTrace& replay, const CostModel& cost,
                                       std::span<const std::string> policies,
                                       std::span<const double> fractions,
                                       const PoolReplayOptions& options) {
  std::vector<SweepPool> pools;
  for (const double f : fractions)
    pools.push_back({f, PoolBytesAt(f, replay.distinct_block_bytes)});
  return RunPoolSweepAt(replay, cost, policies, pools, options);
}

absl::StatusOr<PoolSweep> RunPoolSweepAt(const ReplayTrace& replay, const CostModel& cost,
                                         std::span<const std::string> policies,
                                         std::span<const SweepPool> pools,
                                         const PoolReplayOptions& options) {
  PoolSweep sweep;
  sweep.policies.assign(policies.begin(), policies.end());
  const size_t n = policies.size();
  std::vector<absl::StatusOr<ReplayResult>> results(n * pools.size(),
                                                    absl::UnknownError("not run"));
  // One task per (pool, policy) pair: the slow policies at one pool do not
  // hold back the other pools.
  tbb::parallel_for(size_t{0}, results.size(), [&](size_t i) {
    PoolReplayOptions pair = options;
    pair.pool_bytes = pools[i / n].bytes;
    results[i] = ReplayPool(replay, cost, policies[i % n], pair);
  });
  for (size_t p = 0; p < pools.size(); ++p) {
    SweepPoint point{pools[p].fraction, pools[p].bytes, {}, {}};
    for (size_t k = 0; k < n; ++k) {
      absl::StatusOr<ReplayResult>& r = results[p * n + k];
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrFormat("%s at pool fraction %g: %s", policies[k],
                                            pools[p].fraction, r.status().message()));
      }
      point.results.push_back(std::move(*r));
    }
    sweep.points.push_back(std::move(point));
  }
  return sweep;
}

void AddCostLowerBounds(const ReplayTrace& replay, const CostModel& cost, double eval_from,
                        double transfer_weight, PoolSweep& sweep) {
  const auto eval_start = static_cast<uint32_t>(eval_from * replay.trace->requests.size());
  tbb::parallel_for(size_t{0}, sweep.points.size(), [&](size_t i) {
    SweepPoint& point = sweep.points[i];
    point.cost_bound =
        ComputeCostLowerBound(replay, cost, point.pool_bytes, eval_start, transfer_weight);
  });
}

}  // namespace kvlearn
