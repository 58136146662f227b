// Renders an A/B comparison (one ReplayResult per policy on the same trace,
// pool and cost model) as a human-readable table, JSON or CSV. The JSON shape
// is the stable, documented output of `kvlearn compare` (docs/results.md, "Reading the table").
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
  std::vector<ReplayResult> results;
};

// Fills each result's gap_closed from the "lru" and "belady" rows, when both
// are present.
void FillGapClosed(Comparison& comparison);

std::string FormatTable(const Comparison& comparison);
std::string FormatJson(const Comparison& comparison);
std::string FormatCsv(const Comparison& comparison);

}  // namespace kvlearn
