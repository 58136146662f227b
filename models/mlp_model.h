// The learned model's inference path: a ReLU MLP with sigmoid outputs held in
// Eigen matrices. Normalisation is folded into the first layer at
// construction, so Predict is three matrix-vector products.
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
  std::string version() const override { return version_; }

 private:
  MlpModel() = default;
  std::vector<DenseLayer> layers_;  // first layer with normalisation folded in
  Eigen::Index max_width_ = 0;      // of the inputs and every layer's outputs
  ModelMetadata metadata_;
  std::string version_;
};

}  // namespace kvlearn
