// What each live arm and each shadow policy of the experiment
// (server/experiment.h) cost on the requests of its nodes, counted the way
// the pool replay counts a request (sim/replay_result.h, AddRequest), so
// that these counters and `kvlearn compare` on the same requests agree:
//
//   hit blocks      the longest prefix of the request's chain the pool held
//                   when the request arrived
//   loaded bytes    their bytes (pool -> prefill node)
//   admitted bytes  bytes of the blocks the pool took in for the request
//   recomputed      input tokens - tokens of the hit blocks
//   prefill GPU-s   CostModel::RecomputeMs(hit tokens, input tokens) x GPUs
//                   of a prefill instance
//   transfer s      TransferMs(loaded) + TransferMs(admitted): one load and
//                   one admission copy per request, each with its latency
//   cost s          prefill GPU-s + transfer s (compare's cost_seconds at
//                   its default --transfer-weight 1)
//
// Rendered for /metrics as kvlearn_arm_*{arm} and kvlearn_shadow_*{shadow,
// arm} (a shadow's requests split by the live arm of their node, so each
// shadow sits next to the arm it would replace). Counters only grow; an arm
// or shadow dropped by a reload keeps its last values.
//
// Thread-safety: every method may be called concurrently; a counter set is
// updated with relaxed atomics, and never moves once created.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/cost_model.h"

namespace kvlearn {

// One request as a pool served it (see the file comment).
struct RequestTally {
  uint64_t input_tokens = 0;
  uint64_t hit_tokens = 0;
  uint32_t blocks = 0;
  uint32_t hit_blocks = 0;
  uint64_t loaded_bytes = 0;
  uint64_t admitted_bytes = 0;
};

struct CostCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> block_hits{0};
  std::atomic<uint64_t> block_misses{0};
  std::atomic<uint64_t> loaded_bytes{0};
  std::atomic<uint64_t> admitted_bytes{0};
  std::atomic<uint64_t> recomputed_tokens{0};
  std::atomic<double> prefill_gpu_seconds{0};
  std::atomic<double> transfer_seconds{0};
  // Shadows only: arrivals not served (--shadow-max-blocks reached, or the
  // policy broke its contract), so not in the counters above.
  std::atomic<uint64_t> requests_skipped{0};

  // Adds one request, priced by `cost` as the pool replay prices it.
  void Charge(const CostModel& cost, const RequestTally& r);
  double cost_seconds() const {
    return prefill_gpu_seconds.load(std::memory_order_relaxed) +
           transfer_seconds.load(std::memory_order_relaxed);
  }
};

// One counter set of a /metrics family, with its labels ("k=\"v\",...").
struct LabeledCosts {
  std::string labels;
  const CostCounters* costs = nullptr;
};

// Appends, for every quantity above (requests_total ... cost_seconds_total),
// the series `<family>_<quantity>{labels}` of each set, the quantity's help
// line starting with `help` (the lines come even when `sets` is empty).
void AppendCostSeries(absl::string_view family, absl::string_view help,
                      std::span<const LabeledCosts> sets, std::string* out);
// Appends `<family>_requests_skipped_total{labels}` of each set with `help`.
void AppendSkippedSeries(absl::string_view family, absl::string_view help,
                         std::span<const LabeledCosts> sets, std::string* out);

class ExperimentCosts {
 public:
  // The counters of live arm `arm`, and of shadow `shadow` on the nodes of
  // `arm`, created at first use.
  CostCounters* Arm(const std::string& arm);
  CostCounters* Shadow(const std::string& shadow, const std::string& arm);

  // The kvlearn_arm_* and kvlearn_shadow_* series (docs/experiments.md).
  std::string Render() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<CostCounters>> arms_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::unique_ptr<CostCounters>> shadows_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
