// The samples `kvlearn train` records, as CSV, for fitting a model outside
// kvlearn (in Python: docs/training.md, "A model written in Python").
// One row per block access, in the order recorded:
//   request        index of the request in the trace
//   split          train (request < train_end) or valid
//   <feature>...   the raw feature vector, one column per kFeatureNames entry
//                  (what a model file's forward receives, before normalisation)
//   reused_within_<H>s...  1 if the block's next use comes within H seconds,
//                  0 if not, empty if the trace ends first (censored: leave
//                  it out of the loss, as kvlearn train does)
//   next_use_seconds  until the next use; empty if none
//   saved_ms       what keeping the block saved at that use (recompute minus
//                  transfer, ms), 0 past the longest horizon
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "learner/sample_recorder.h"

namespace kvlearn {

// Writes `samples` to `path` (through a temporary file renamed into place, so
// a crash leaves no partial file under that name). `progress`, if set, hears
// the rows written so far after each megabyte.
absl::Status WriteSamplesCsv(const std::string& path, const SampleSet& samples,
                             std::span<const double> horizons_seconds, uint32_t train_end,
                             const std::function<void(size_t rows)>& progress = nullptr);

}  // namespace kvlearn
