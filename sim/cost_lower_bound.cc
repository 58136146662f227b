#include "sim/cost_lower_bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvlearn {
namespace {

struct Interval {
  double saving_ms;  // weighted, in cost_seconds' units x 1000
  double byte_steps;
  double bytes;
  uint32_t from;  // kept over the steps after requests from .. to - 1
  uint32_t to;
};

// The Lagrangian dual of keeping intervals under a capacity at every step:
// with a price lambda[m] >= 0 per byte at step m, no set of intervals that
// fits at every step saves more than
//   D(lambda) = capacity x sum(lambda) + sum_i max(0, saving_i - bytes_i x
//   (sum of lambda over i's steps)),
// whatever lambda is (weak duality). So every lambda tried gives a valid
// bound, and the descent only looks for a smaller one: prices go up at steps
// where the intervals worth their price overfill the pool and down where
// they leave it room.
class StepPrices {
 public:
  StepPrices(const std::vector<Interval>& intervals, double capacity, uint32_t steps,
             double start_price)
      : intervals_(intervals),
        capacity_(capacity),
        price_(steps, start_price),
        prefix_(steps + 1),
        load_(steps + 1) {}

  // D at the current prices; fills load_ with the bytes of the intervals
  // worth keeping at those prices, per step.
  double Evaluate() {
    prefix_[0] = 0;
    for (size_t m = 0; m < price_.size(); ++m) prefix_[m + 1] = prefix_[m] + price_[m];
    std::fill(load_.begin(), load_.end(), 0.0);
    double value = capacity_ * prefix_.back();
    for (const Interval& i : intervals_) {
      const double margin = i.saving_ms - i.bytes * (prefix_[i.to] - prefix_[i.from]);
      if (margin <= 0) continue;
      value += margin;
      load_[i.from] += i.bytes;
      load_[i.to] -= i.bytes;
    }
    return value;
  }

  // One multiplicative step of size `rate` against the subgradient.
  void Step(double rate) {
    double load = 0;
    for (size_t m = 0; m < price_.size(); ++m) {
      load += load_[m];
      const double excess = std::clamp((load - capacity_) / capacity_, -1.0, 1.0);
      price_[m] *= std::exp(rate * excess);
    }
  }

 private:
  const std::vector<Interval>& intervals_;
  double capacity_;
  std::vector<double> price_;
  std::vector<double> prefix_;
  std::vector<double> load_;  // differences: + at an interval's first step, - past its last
};

}  // namespace

CostLowerBound ComputeCostLowerBound(const ReplayTrace& replay, const CostModel& cost,
                                     uint64_t pool_bytes, uint32_t eval_start,
                                     double transfer_weight, uint32_t iterations) {
  const Trace& trace = *replay.trace;
  const auto n = static_cast<uint32_t>(trace.requests.size());
  const double gpus = cost.GpusPerInstance();
  // The request that last used each block: where a kept interval starts.
  constexpr uint32_t kNotYet = UINT32_MAX;
  std::vector<uint32_t> last_request(replay.catalog.size(), kNotYet);
  std::vector<Interval> intervals;
  double no_cache_ms = 0;

  for (uint32_t ri = 0; ri < n; ++ri) {
    const TraceRequest& r = trace.requests[ri];
    const bool evaluated = ri >= eval_start;
    // f(h): the request's cost when its first h blocks hit, admissions aside.
    uint64_t hit_tokens = 0;
    uint64_t loaded_bytes = 0;
    double cost_before = gpus * cost.RecomputeMs(0, r.input_length);
    if (evaluated) no_cache_ms += cost_before;
    for (uint32_t i = 0; i < r.num_blocks; ++i) {
      const BlockIndex b = replay.blocks[r.first_block + i];
      hit_tokens += trace.TokensOfBlock(r, i);
      loaded_bytes += replay.catalog[b].bytes;
      const double cost_after = gpus * cost.RecomputeMs(hit_tokens, r.input_length) +
                                transfer_weight * cost.TransferMs(loaded_bytes);
      const double saving = cost_before - cost_after;
      cost_before = cost_after;
      const uint32_t previous = last_request[b];
      last_request[b] = ri;
      if (!evaluated || previous == kNotYet || !(saving > 0)) continue;
      const auto bytes = static_cast<double>(replay.catalog[b].bytes);
      intervals.push_back({saving, bytes * (ri - previous), bytes, previous, ri});
    }
  }

  // Fractional knapsack: the most saving per byte-step first.
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.saving_ms * b.byte_steps > b.saving_ms * a.byte_steps;
  });
  const uint32_t steps = n > 0 ? n - 1 : 0;
  double budget = static_cast<double>(pool_bytes) * steps;
  double saved_ms = 0;
  double critical_price = 0;  // saving per byte-step of the interval kept in part
  CostLowerBound bound{.intervals = intervals.size()};
  for (const Interval& interval : intervals) {
    if (interval.byte_steps <= budget) {
      budget -= interval.byte_steps;
      saved_ms += interval.saving_ms;
      ++bound.intervals_kept;
      continue;
    }
    saved_ms += interval.saving_ms * (budget / interval.byte_steps);
    critical_price = interval.saving_ms / interval.byte_steps;
    break;
  }
  bound.average_capacity_cost_seconds = (no_cache_ms - saved_ms) / 1000.0;

  // From the one price the knapsack found (its dual), prices per step.
  if (critical_price > 0 && pool_bytes > 0 && iterations > 0) {
    StepPrices prices(intervals, static_cast<double>(pool_bytes), steps, critical_price);
    for (uint32_t k = 0; k < iterations; ++k) {
      saved_ms = std::min(saved_ms, prices.Evaluate());
      prices.Step(0.5 / std::sqrt(1.0 + k));
    }
  }
  bound.no_cache_cost_seconds = no_cache_ms / 1000.0;
  bound.cost_seconds = (no_cache_ms - saved_ms) / 1000.0;
  return bound;
}

}  // namespace kvlearn
