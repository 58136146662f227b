// Turns a replay into supervised samples: at every block access, the block's
// feature vector (the one extractor, fed exactly as the learned policy feeds
// it) and labels read from the trace's future:
//   - seconds and requests until the block's next use,
//   - for each horizon H, whether that next use comes within H, and whether
//     that is known (the trace must run on for H after the access, up to the
//     last recorded request, whatever
//     the label; keeping only the known positives near the end would bias the
//     model towards reuse),
//   - the cost saved by having kept it: R - T when reused within the longest
//     horizon, else 0.
// The pool evolves under a chosen policy (LRU by default), which fixes the
// pool-dependent features (is_leaf, occupancy, eviction rate).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "features/feature_extractor.h"
#include "features/feature_schema.h"
#include "models/learned_model.h"
#include "sim/replay_trace.h"

namespace kvlearn {

struct SampleSet {
  size_t num_horizons = 0;
  std::vector<float> features;           // size() x kNumFeatures, row-major
  std::vector<float> reused;             // size() x num_horizons: 1 = next use within horizon
  std::vector<uint8_t> known;            // size() x num_horizons: 0 = censored by the trace's end
  std::vector<uint32_t> request;         // request index of the access
  std::vector<uint32_t> block;           // BlockIndex
  std::vector<double> next_use_seconds;  // +inf when never used again
  std::vector<uint32_t> requests_to_next_use;  // 0 when never used again
  std::vector<float> saved_ms;

  size_t size() const { return request.size(); }
  // Rows with request in [begin, end).
  SampleSet Slice(uint32_t begin_request, uint32_t end_request) const;
};

// Permutes the samples' labels (reuse per horizon with its known flag, next
// use, saving) across rows in a seeded shuffle, leaving the features in place:
// a model trained on the result has no signal to learn. `kvlearn train
// --shuffle-labels` uses it to check that the verdict refuses such a model.
void ShuffleLabels(SampleSet& samples, uint64_t seed);

struct RecordOptions {
  std::string policy = "lru";  // drives the pool while recording
  uint64_t pool_bytes = 0;
  uint32_t end_request = UINT32_MAX;  // record requests before this index
  std::vector<double> horizons_seconds = {15, 30, 60, 120, 240, 480, 960, 1920, 3840};
  std::shared_ptr<const LearnedModel> model;       // when `policy` is "learned"
  FeatureSink policy_feature_sink;                 // tests: the driving policy's own vectors
  std::atomic<uint64_t>* requests_done = nullptr;  // when set, advanced per request replayed
};

// The horizons a training split can teach: those for which at least half of
// the requests before `train_end` are followed by H seconds of trace up to
// request `label_end` (the recorder's end_request), so that their labels are
// known. A longer horizon would leave its model output trained on a few
// early samples, or on none.
std::vector<double> LearnableHorizons(const Trace& trace, uint32_t train_end, uint32_t label_end,
                                      std::span<const double> horizons_seconds);

absl::StatusOr<SampleSet> RecordSamples(const ReplayTrace& replay, const CostModel& cost,
                                        const RecordOptions& options);

}  // namespace kvlearn
