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

// How a sampled plan's trace was drawn (sim/trace_sample.h).
struct PlanSample {
  double rate = 0;             // --sample
  uint64_t kept_requests = 0;  // of the whole trace, warm-up included
  uint64_t kept_block_accesses = 0;
  uint64_t warmup_requests = 0;  // read the shared chains first, not counted
  uint64_t shared_blocks = 0;    // blocks read by shared_threshold requests or more
  uint64_t shared_threshold = 0;
  double byte_rate = 0;  // r_b: sampled share of the unshared distinct bytes
  double cost_rate = 0;  // r_c: sampled share of the no-pool cost
};

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
  std::optional<PlanSample> sample;  // set when the trace was sampled
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
