#include "learner/model_judge.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tsan_hand_off.h"
#include "oneapi/tbb/parallel_for.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"

namespace kvlearn {
namespace {

constexpr char kLearned[] = "learned";
// The row of `learned` without a model: its heuristic experts only.
constexpr char kNoModel[] = "learned, no model";

// The trace's first `end` requests: what the judge may read.
Trace Head(const Trace& trace, uint32_t end) {
  Trace head;
  head.source = trace.source;
  head.block_size = trace.block_size;
  for (uint32_t i = 0; i < end; ++i) {
    const TraceRequest& r = trace.requests[i];
    head.Add(r.timestamp_ms, r.input_length, r.output_length, trace.BlocksOf(r), r.line);
  }
  return head;
}

}  // namespace

std::vector<std::string> JudgingHeuristics() {
  std::vector<std::string> names;
  for (const std::string_view name : PolicyNames()) {
    if (name == kLearned || PolicyNeedsModel(name) || IsOfflinePolicy(name) ||
        IsRecomputeBound(name)) {
      continue;
    }
    names.emplace_back(name);
  }
  return names;
}

absl::StatusOr<std::vector<std::vector<JudgedPolicy>>> PriceModels(
    const Trace& trace, const CostModel& cost, const std::vector<NamedModel>& models,
    const JudgeOptions& options) {
  if (!(options.first_request < options.end_request &&
        options.end_request <= trace.requests.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "judging needs requests [first, end) inside the trace's ", trace.requests.size(), ", got [",
        options.first_request, ", ", options.end_request, ")"));
  }
  if (options.pool_fractions.empty()) {
    return absl::InvalidArgumentError("judging needs at least one pool fraction");
  }
  if (models.empty()) return absl::InvalidArgumentError("judging needs at least one model");
  const Trace head = Head(trace, options.end_request);
  auto replay = BuildReplayTrace(head, cost);
  if (!replay.ok()) return replay.status();

  // Row i < models.size() is models[i]'s policy with its model.
  std::vector<std::string> policies;
  for (const NamedModel& m : models) policies.push_back(m.name);
  for (std::string& h : JudgingHeuristics()) policies.push_back(std::move(h));
  const size_t cells = policies.size() * options.pool_fractions.size();
  std::vector<absl::StatusOr<ReplayResult>> results(cells, absl::UnknownError("not run"));
  // ReplayPool prices request i from floor(eval_from * n) on: half a request
  // past first_request keeps rounding from moving the split.
  const double eval_from = (options.first_request + 0.5) / options.end_request;
  const auto price_cell = [&](size_t cell) {
    const double fraction = options.pool_fractions[cell / policies.size()];
    const size_t row = cell % policies.size();
    PoolReplayOptions o;
    o.pool_bytes = static_cast<uint64_t>(fraction * options.distinct_block_bytes);
    o.eval_from = eval_from;
    o.requests_done = options.requests_done;
    if (row < models.size()) o.model = models[row].model;
    results[cell] =
        ReplayPool(*replay, cost, row < models.size() ? models[row].policy : policies[row], o);
  };
#ifdef KVLEARN_TSAN_HAND_OFF
  // Debian's TBB is not instrumented, so ThreadSanitizer cannot see it hand a
  // task to a worker and reports every access: under it the cells run in turn.
  for (size_t cell = 0; cell < cells; ++cell) price_cell(cell);
#else
  tbb::parallel_for(size_t{0}, cells, price_cell);
#endif

  std::vector<std::vector<JudgedPolicy>> tables;
  for (size_t p = 0; p < options.pool_fractions.size(); ++p) {
    std::vector<JudgedPolicy> rows;
    for (size_t i = 0; i < policies.size(); ++i) {
      const auto& r = results[p * policies.size() + i];
      if (!r.ok()) return r.status();
      rows.push_back({policies[i], r->cost_seconds(1.0)});
    }
    tables.push_back(std::move(rows));
  }
  return tables;
}

absl::StatusOr<std::vector<PoolVerdict>> JudgeModel(const Trace& trace, const CostModel& cost,
                                                    std::shared_ptr<const LearnedModel> model,
                                                    const JudgeOptions& options) {
  auto tables =
      PriceModels(trace, cost, {{kLearned, model}, {kNoModel, nullptr, kLearned}}, options);
  if (!tables.ok()) return tables.status();
  std::vector<PoolVerdict> verdicts;
  for (size_t p = 0; p < options.pool_fractions.size(); ++p) {
    PoolVerdict v;
    v.judgement.pool_fraction = options.pool_fractions[p];
    v.judgement.pool_bytes =
        static_cast<uint64_t>(options.pool_fractions[p] * options.distinct_block_bytes);
    v.rows = std::move((*tables)[p]);
    for (const JudgedPolicy& row : v.rows) {
      if (row.policy == kLearned) {
        v.judgement.learned_cost_s = row.cost_s;
        continue;
      }
      if (row.policy == kNoModel) {
        v.judgement.no_model_cost_s = row.cost_s;
        continue;
      }
      if (row.policy == "lru") v.judgement.lru_cost_s = row.cost_s;
      if (v.judgement.best_heuristic.empty() || row.cost_s < v.judgement.best_heuristic_cost_s) {
        v.judgement.best_heuristic = row.policy;
        v.judgement.best_heuristic_cost_s = row.cost_s;
      }
    }
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

}  // namespace kvlearn
