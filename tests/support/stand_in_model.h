// A learned model whose reuse curve a hand-worked test chooses: this build's
// feature schema, horizons 10 s and 100 s, and outputs that `curve` computes
// from the feature vector (no weights, no file).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "features/feature_schema.h"
#include "models/learned_model.h"

namespace kvlearn {

class StandInModel final : public LearnedModel {
 public:
  using Curve = std::function<void(std::span<const float> features, std::span<float> out)>;

  StandInModel(std::string version, Curve curve)
      : version_(std::move(version)), curve_(std::move(curve)) {
    meta_.schema_version = kFeatureSchemaVersion;
    meta_.horizons_seconds = {10, 100};
  }
  const ModelMetadata& metadata() const override { return meta_; }
  void Predict(std::span<const float> x, std::span<float> out) const override { curve_(x, out); }
  std::string version() const override { return version_; }

 private:
  ModelMetadata meta_;
  std::string version_;
  Curve curve_;
};

}  // namespace kvlearn
