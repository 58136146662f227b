// A trained reuse predictor: for a block's feature vector (features/), the
// probability that the block is used again within each of several horizons.
//
// Model files are written by `kvlearn train`: a TorchScript archive with the
// MLP (normalisation included) and its metadata as extra files. Load()
// (models/model_reader.cc) reads them without LibTorch, so only training
// links it, and refuses a file whose feature schema version differs from
// this build's, whose feature names are not this build's (as many as the
// inputs), whose weights are not finite, or that fails a probe inference;
// its errors are one line.
//
// Immutable once built; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_judgement.h"
#include "models/traffic_summary.h"

namespace kvlearn {

struct ModelMetadata {
  uint32_t schema_version = 0;           // features/feature_schema.h
  std::vector<double> horizons_seconds;  // output k = P(next use within horizons_seconds[k])
  std::vector<float> feature_mean;       // normalisation, from the training split
  std::vector<float> feature_std;
  std::vector<std::string> feature_names;  // one per input, this build's kFeatureNames
  std::string trace_fingerprint;           // of the training trace
  std::string created_by;                  // command line that trained it
  // The BLAS kernels that trained it (learner/blas_kernels.h); empty in files
  // written before train recorded them.
  std::string training_blas;
  // Absent in files written before kvlearn train judged its models, or when
  // the weights judged are not the file's: the model is "not judged".
  std::optional<ModelJudgement> judgement;
  // The training split's traffic (absent in older files).
  std::optional<TrafficSummary> training_traffic;
};

class LearnedModel {
 public:
  virtual ~LearnedModel() = default;

  // See the file comment.
  static absl::StatusOr<std::shared_ptr<const LearnedModel>> Load(const std::string& path);

  virtual const ModelMetadata& metadata() const = 0;
  size_t num_outputs() const { return metadata().horizons_seconds.size(); }
  // Writes num_outputs() probabilities for raw (un-normalised) features in
  // schema order.
  virtual void Predict(std::span<const float> features, std::span<float> out) const = 0;
  // Predict for n blocks at once: `features` holds n vectors of the input
  // count one after another, `out` n curves of num_outputs(). Gives the
  // same floats as n calls of Predict; a model may override it to run the
  // n through each layer together.
  virtual void PredictBatch(std::span<const float> features, size_t n, std::span<float> out) const {
    const size_t in = n ? features.size() / n : 0, k = num_outputs();
    for (size_t s = 0; s < n; ++s) Predict(features.subspan(s * in, in), out.subspan(s * k, k));
  }
  // Short identifier for logs and /metrics: "<file name>@<16 hex digits>", a
  // hash of the file's bytes (so two different models never share one).
  virtual std::string version() const = 0;
};

}  // namespace kvlearn
