// One trace replayed under several policies at several pool sizes: the data
// behind `kvlearn plan` (cli/plan_command.cc). The trace is built for replay
// once (ReplayTrace) and every (pool size, policy) pair replays it in
// parallel (TBB), each pair exactly as `kvlearn compare` replays that policy
// at that pool (ReplayPool), so a sweep point's rows are compare's rows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "sim/cost_lower_bound.h"
#include "sim/pool_simulator.h"
#include "sim/replay_result.h"
#include "sim/replay_trace.h"

namespace kvlearn {

// The pool of `fraction` of the trace's distinct-block bytes, rounded down
// as `kvlearn compare --pool-fraction` rounds it.
inline uint64_t PoolBytesAt(double fraction, uint64_t distinct_block_bytes) {
  return static_cast<uint64_t>(fraction * distinct_block_bytes);
}

// `count` pool fractions spaced evenly in log from `min_fraction` to
// `max_fraction` (both included; `count` 1 gives `max_fraction` alone), in
// increasing order. REQUIRES: 0 < min_fraction <= max_fraction, count >= 1.
std::vector<double> LogSpacedFractions(double min_fraction, double max_fraction, uint32_t count);

// `fractions` (sorted) with `fraction` added in order, replacing a member
// within one part in 10^9 of it, so the sweep holds exactly the pool a user
// named.
std::vector<double> WithFraction(std::vector<double> fractions, double fraction);

struct SweepPoint {
  double pool_fraction = 0;
  uint64_t pool_bytes = 0;
  std::vector<ReplayResult> results;  // one per policy, in the sweep's policy order
  // What no policy can cost less than at this pool (AddCostLowerBounds).
  std::optional<CostLowerBound> cost_bound;
};

struct PoolSweep {
  std::vector<std::string> policies;
  std::vector<SweepPoint> points;  // in the order of the fractions given
};

// Replays every policy of `policies` at every pool of `fractions` (of the
// trace's distinct-block bytes), with `options` but for its pool_bytes. All
// pairs run in parallel; results do not depend on the order they run in.
// options.requests_done, if set, advances by one per request replayed (total:
// requests x policies x fractions). Fails with the first failing pair's
// status (policy and pool named).
absl::StatusOr<PoolSweep> RunPoolSweep(const ReplayTrace& replay, const CostModel& cost,
                                       std::span<const std::string> policies,
                                       std::span<const double> fractions,
                                       const PoolReplayOptions& options);

// A pool of the sweep: the share it is named by and the bytes it replays at.
struct SweepPool {
  double fraction = 0;
  uint64_t bytes = 0;
};

// The same at pools of given bytes (a sampled trace replays its pools at
// other bytes than its own distinct-block bytes give: sim/trace_sample.h).
absl::StatusOr<PoolSweep> RunPoolSweepAt(const ReplayTrace& replay, const CostModel& cost,
                                         std::span<const std::string> policies,
                                         std::span<const SweepPool> pools,
                                         const PoolReplayOptions& options);

// Fills every point's cost_bound (sim/cost_lower_bound.h) for the requests
// from `eval_from` on and cost_seconds' transfer weight, points in parallel.
void AddCostLowerBounds(const ReplayTrace& replay, const CostModel& cost, double eval_from,
                        double transfer_weight, PoolSweep& sweep);

}  // namespace kvlearn
