// A trained reuse predictor, loaded from a model file written by
// `kvlearn train`: a TorchScript archive holding the MLP and, as extra files,
// its metadata (feature schema version, normalisation statistics, label
// definition, training-trace fingerprint). Load() refuses a file whose schema
// version differs from the running feature extractor's, whose weights are not
// finite, or that fails a probe inference.
//
// Inference does not go through LibTorch: Load() copies the weights into an
// Eigen MLP, which is what the policies call on the hot path.
//
// Immutable after Load(); safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace kvlearn {

struct ModelMetadata {
  uint32_t schema_version = 0;     // features/feature_schema.h
  std::string label;               // what the output predicts, in words
  double horizon_seconds = 0;      // reuse horizon of the label
  std::string trace_fingerprint;   // of the training trace
  std::string created_by;          // command line that trained it
};

class LearnedModel {
 public:
  virtual ~LearnedModel() = default;

  static absl::StatusOr<std::shared_ptr<const LearnedModel>> Load(const std::string& path);

  virtual const ModelMetadata& metadata() const = 0;
  // Probability that the block is used again within the horizon, from raw
  // (un-normalised) features in schema order.
  virtual float PredictReuse(std::span<const float> features) const = 0;
  // Short identifier for logs and /metrics: file name + fingerprint prefix.
  virtual std::string version() const = 0;
};

}  // namespace kvlearn
