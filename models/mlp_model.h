// The learned model's inference path: a ReLU MLP with sigmoid outputs held in
// Eigen matrices. Normalisation is folded into the first layer at
// construction, so Predict is three matrix-vector products (PredictBatch: a
// matrix product per layer over a request's blocks).
#pragma once

#include <Eigen/Dense>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/learned_model.h"

namespace kvlearn {

struct DenseLayer {
  Eigen::MatrixXf weight;  // out x in
  Eigen::VectorXf bias;    // out
};

class MlpModel final : public LearnedModel {
 public:
  // Checks shapes (inputs = metadata's feature count, outputs = horizons),
  // finiteness and a probe inference. `layers` all but the last use ReLU.
  static absl::StatusOr<std::shared_ptr<const MlpModel>> Create(std::vector<DenseLayer> layers,
                                                                ModelMetadata metadata,
                                                                std::string version);

  const ModelMetadata& metadata() const override { return metadata_; }
  void Predict(std::span<const float> features, std::span<float> out) const override;
  // Each layer over all n blocks together, each weight read once for four
  // blocks, 8 rows a step (one AVX register where the CPU has AVX, else two
  // SSE ones). Every output is summed over its inputs in the order Predict's
  // Eigen product sums them (from zero, input 0 first, then added to the
  // bias), so the floats are Predict's (mlp_batch_test checks it).
  void PredictBatch(std::span<const float> features, size_t n, std::span<float> out) const override;
  // PredictBatch with AVX (REQUIRES: CpuHasAvx()) or with SSE only, so a
  // test can check both ways on one machine.
  void PredictBatchOn(bool avx, std::span<const float> features, size_t n,
                      std::span<float> out) const;
  static bool CpuHasAvx();
  std::string version() const override { return version_; }

 private:
  MlpModel() = default;
  std::vector<DenseLayer> layers_;  // first layer with normalisation folded in
  Eigen::Index max_width_ = 0;      // of the inputs and every layer's outputs
  // PredictBatch's copy of the weights, rows padded with zeros to a multiple
  // of 8, and the widest of them.
  std::vector<Eigen::MatrixXf> padded_weights_;
  Eigen::Index padded_width_ = 0;
  ModelMetadata metadata_;
  std::string version_;
};

}  // namespace kvlearn
