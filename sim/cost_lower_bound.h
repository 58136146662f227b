// A lower bound on the cost (ReplayResult::cost_seconds) that ANY policy can
// reach on a trace at a pool size: no eviction or admission rule, online or
// offline, pays less. Belady (farthest next use) is not that bound: blocks
// differ in bytes and in what a miss costs, and admission can be refused.
//
// The bound relaxes the replay in three ways, each of which can only lower the
// minimum (the argument, step by step, is in docs/planning.md):
//  1. Each evaluated request's cost, as a function of how many leading blocks
//     hit, is split into per-block savings: a hit on the block at depth d
//     saves f(d) - f(d + 1), where f(h) is the request's prefill GPU-ms plus
//     the weighted load transfer-ms when h blocks hit. The savings add up to
//     the true cost for every prefix of hits; the relaxation lets any set of
//     blocks hit, prefix or not.
//  2. Admission transfers are free (they only add cost).
//  3. The pool's capacity is priced instead of enforced: a block kept from
//     its access in request r' to its next access in request r occupies its
//     bytes over the request steps r' .. r - 1. With a price per byte for
//     every step, no set of intervals that fits after every request saves
//     more than capacity x the sum of the prices plus, per interval, its
//     saving less its bytes x its steps' prices (when positive): the
//     Lagrangian dual of the interval LP, valid for ANY prices.
// The prices start at the one price of the fractional knapsack over the
// capacity held on average (the PFOO-L bound of Berger, Beckmann and
// Harchol-Balter, SIGMETRICS '18, here priced in cost and relaxed over prefix
// chains) and take multiplicative steps against the overfill; the least
// value seen gives the bound.
#pragma once

#include <cstdint>

#include "core/cost_model.h"
#include "sim/replay_trace.h"

namespace kvlearn {

struct CostLowerBound {
  // The bound in cost_seconds' units (prefill GPU-s + weight x transfer s),
  // over the evaluated requests.
  double cost_seconds = 0;
  // The bound with the capacity held on average only (relaxation 3 alone).
  double average_capacity_cost_seconds = 0;
  // The evaluated requests' cost with nothing cached: where the bound starts.
  double no_cache_cost_seconds = 0;
  // Reuse intervals ending in an evaluated request with a positive saving,
  // and how many of them the bound keeps whole (one more may be kept in part).
  uint64_t intervals = 0;
  uint64_t intervals_kept = 0;
};

// Requests before `eval_start` only warm the pool (their cost is not
// counted), as in ReplayPool with eval_from = eval_start / requests.
CostLowerBound ComputeCostLowerBound(const ReplayTrace& replay, const CostModel& cost,
                                     uint64_t pool_bytes, uint32_t eval_start,
                                     double transfer_weight, uint32_t iterations = 200);

}  // namespace kvlearn
