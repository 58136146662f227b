// Judges a trained model the way `compare` would run it: replays the trace's
// first `end_request` requests under `learned` with the model and without one
// (row "learned, no model"), `lru` and every other online heuristic, on the same pool and cost
// model, and prices the requests from `first_request` on (the earlier ones warm the pool). With
// first_request = the end of the training split and end_request = the end of
// the validation split, that is `kvlearn compare --eval-from` on requests the
// model was not trained on and the trace after them unread.
//
// Thread-safety: JudgeModel may be called from any thread; it replays the
// policies in parallel (TBB).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "datasets/trace.h"
#include "models/learned_model.h"
#include "models/model_judgement.h"

namespace kvlearn {

struct JudgeOptions {
  uint32_t first_request = 0;  // priced requests: [first_request, end_request)
  uint32_t end_request = 0;
  // Pools as shares of `distinct_block_bytes` (compare's --pool-fraction rule:
  // the distinct-block bytes of the whole trace file).
  std::vector<double> pool_fractions = {0.1};
  uint64_t distinct_block_bytes = 0;
  // When set, advanced per request replayed: end_request per policy and pool,
  // (JudgeModel: 2 + JudgingHeuristics().size()) * pool_fractions.size() * end_request in all.
  std::atomic<uint64_t>* requests_done = nullptr;
};

struct JudgedPolicy {
  std::string policy;
  double cost_s = 0;  // cost_seconds with transfer weight 1
};

// A model to price, the row name it gets and the policy that runs it:
// `learned` (the follower, as it serves) or `learned-model` (the model alone,
// which shows what the model itself is worth: the follower hides a model
// without signal behind its heuristics).
struct NamedModel {
  std::string name;
  std::shared_ptr<const LearnedModel> model;
  std::string policy = "learned";
};

struct PoolVerdict {
  PoolJudgement judgement;
  // learned, "learned, no model", then the heuristics in PolicyNames order
  std::vector<JudgedPolicy> rows;
};

// The online policies a model is judged against: every policy that reads
// neither the future nor a model, other than the recompute bound (no-cache).
std::vector<std::string> JudgingHeuristics();

// The cost table behind a verdict, for several models at once (`kvlearn model
// evaluate` prices a candidate beside the serving model): per pool fraction,
// in order, one row per entry of `models` (its policy with its model, named as
// the entry), then one per JudgingHeuristics() policy. When set,
// options.requests_done reaches (models.size() + JudgingHeuristics().size()) *
// pool_fractions.size() * end_request.
// REQUIRES: as JudgeModel; `models` not empty.
absl::StatusOr<std::vector<std::vector<JudgedPolicy>>> PriceModels(
    const Trace& trace, const CostModel& cost, const std::vector<NamedModel>& models,
    const JudgeOptions& options);

// One PoolVerdict per pool fraction, in order.
// REQUIRES: first_request < end_request <= trace.requests.size().
absl::StatusOr<std::vector<PoolVerdict>> JudgeModel(const Trace& trace, const CostModel& cost,
                                                    std::shared_ptr<const LearnedModel> model,
                                                    const JudgeOptions& options);

}  // namespace kvlearn
