// Renders a pool plan (a sweep and its answers) as `kvlearn plan` prints it:
// a table of cost s per policy by pool size with the answers under it, JSON
// (every sweep point as `kvlearn compare --format json` prints that pool, plus
// the answers) or CSV (compare's CSV rows, each led by its pool). The shapes
// are documented in docs/planning.md. Plain functions of their input;
// thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "sim/comparison_report.h"
#include "sim/plan_answers.h"
#include "sim/pool_sweep.h"

namespace kvlearn {

struct Plan {
  // The run's header as compare fills it (trace, evaluated requests and
  // accesses, cost model, prefill instances, w); pool_bytes and results are
  // each sweep point's.
  Comparison header;
  uint64_t distinct_block_bytes = 0;
  double prefill_nodes_sized_at = 0;  // pool fraction --prefill-nodes auto sized at
  double pool_fraction = 0;           // the user's pool
  double target = 0.9;
  std::optional<double> gpu_hour_price;
  PoolSweep sweep;
  PlanAnswers answers;
};

// Sweep point `point` as `kvlearn compare` reports that pool (gap closed
// filled from its lru and belady rows).
Comparison ComparisonAt(const Plan& plan, size_t point);

std::string FormatPlanTable(const Plan& plan);
std::string FormatPlanJson(const Plan& plan);
std::string FormatPlanCsv(const Plan& plan);

}  // namespace kvlearn
