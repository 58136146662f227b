// What each node's pools would have cost at other sizes (serve
// --resize-estimates): per node, its live pools' own cost (scale 1) and the
// cost of two ghost pools (server/resize_ghosts.h) running the node's live
// policy at 0.5x and 2x each pool's configured bytes, fed the node's
// arrivals exactly as shadows are (server/shadow_pool.h). A node's tiers
// add up into one set per scale. Counted as server/experiment_costs.h
// counts, so the three sit side by side on /metrics as
// kvlearn_resize_*{node,scale="0.5"|"1"|"2"} (docs/experiments.md).
//
// Bounded: every ghost pool of the sidecar draws its blocks from one budget
// of its own (--resize-max-blocks), as shadows draw from theirs; an arrival
// past it is skipped by that ghost and counted
// (kvlearn_resize_requests_skipped_total).
//
// Thread-safety: every method may be called concurrently; counter sets never
// move once created.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/experiment_costs.h"
#include "server/shadow_budget.h"

namespace kvlearn {

// The capacity scales the ghost pools run at, and their label values.
inline constexpr std::array<double, 2> kResizeScales = {0.5, 2.0};
inline constexpr std::array<const char*, 2> kResizeScaleLabels = {"0.5", "2"};

class ResizeEstimates {
 public:
  explicit ResizeEstimates(uint64_t max_blocks) { budget_.max_blocks = max_blocks; }

  // The counters of `node`'s live pools, and of its ghost pools at
  // kResizeScales[scale], created at first use.
  CostCounters* Live(const std::string& node);
  CostCounters* Ghost(const std::string& node, size_t scale);
  ShadowBudget* budget() { return &budget_; }

  // The kvlearn_resize_* series; empty before any node was seen.
  std::string Render() const;

 private:
  struct NodeCosts {
    CostCounters live;
    std::array<CostCounters, kResizeScales.size()> ghosts;
  };
  NodeCosts& Of(const std::string& node);

  ShadowBudget budget_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<NodeCosts>> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
