// Renders an A/B comparison (one ReplayResult per policy on the same trace,
// pool and cost model) as a human-readable table, JSON or CSV. The JSON shape
// is the stable, documented output of `kvlearn compare` (docs/results.md,
// "Reading the table"). Plain functions of their input; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/replay_result.h"

namespace kvlearn {

struct Comparison {
  std::string trace;
  uint64_t requests = 0;        // evaluated requests
  uint64_t block_accesses = 0;  // evaluated block accesses
  uint64_t pool_bytes = 0;
  std::string cost_model;  // "flops" or "kvlearn-paper"
  uint32_t prefill_nodes = 0;
  bool prefill_nodes_auto = false;  // sized by --prefill-nodes auto
  double transfer_weight = 1;       // w in cost_seconds
  std::vector<ReplayResult> results;
};

// Whether any row's utilization reaches kSaturatedUtilization.
bool AnySaturated(const std::vector<ReplayResult>& results);
// "lru (96%), ..." for those rows; empty if none.
std::string SaturatedRows(const std::vector<ReplayResult>& results);

// Fills each result's gap_closed and cost_gap_closed from the "lru" and
// "belady" rows, when both are present.
void FillGapClosed(Comparison& comparison);

std::string FormatTable(const Comparison& comparison);
std::string FormatJson(const Comparison& comparison);
std::string FormatCsv(const Comparison& comparison);

}  // namespace kvlearn
