#include "models/mlp_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::StatusOr<std::shared_ptr<const MlpModel>> MlpModel::Create(std::vector<DenseLayer> layers,
                                                                 ModelMetadata metadata,
                                                                 std::string version) {
  if (layers.empty()) return absl::InvalidArgumentError("model has no layers");
  const auto inputs = static_cast<Eigen::Index>(metadata.feature_mean.size());
  if (metadata.feature_std.size() != metadata.feature_mean.size()) {
    return absl::InvalidArgumentError("feature_mean and feature_std differ in length");
  }
  Eigen::Index width = inputs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const DenseLayer& l = layers[i];
    if (l.weight.cols() != width || l.bias.size() != l.weight.rows()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " has shape ", l.weight.rows(),
                                                     "x", l.weight.cols(), " but ", width,
                                                     " inputs arrive"));
    }
    if (!l.weight.allFinite() || !l.bias.allFinite()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " has non-finite weights"));
    }
    width = l.weight.rows();
  }
  if (width != static_cast<Eigen::Index>(metadata.horizons_seconds.size())) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", width, " outputs but ",
                                                   metadata.horizons_seconds.size(), " horizons"));
  }
  // x_norm = (x - mean) / std, so W x_norm + b = (W / std) x + (b - W (mean / std)).
  Eigen::VectorXf inv_std(inputs), mean(inputs);
  for (Eigen::Index j = 0; j < inputs; ++j) {
    const float s = metadata.feature_std[j];
    if (!(std::isfinite(s) && s > 0) || !std::isfinite(metadata.feature_mean[j])) {
      return absl::InvalidArgumentError(absl::StrCat("feature ", j, " has a bad normalisation"));
    }
    inv_std[j] = 1.0f / s;
    mean[j] = metadata.feature_mean[j];
  }
  DenseLayer& first = layers.front();
  first.weight = first.weight * inv_std.asDiagonal();
  first.bias -= first.weight * mean;

  std::shared_ptr<MlpModel> model(new MlpModel);
  model->max_width_ = inputs;
  for (const DenseLayer& l : layers) model->max_width_ = std::max(model->max_width_, l.bias.size());
  model->layers_ = std::move(layers);
  model->metadata_ = std::move(metadata);
  model->version_ = std::move(version);
  // Probe: the mean input must give finite probabilities.
  std::vector<float> probe(model->metadata_.feature_mean), out(width);
  model->Predict(probe, out);
  for (float p : out) {
    if (!(p >= 0 && p <= 1)) return absl::InvalidArgumentError("probe inference is not finite");
  }
  return std::shared_ptr<const MlpModel>(std::move(model));
}

void MlpModel::Predict(std::span<const float> features, std::span<float> out) const {
  // Per-thread scratch as wide as the widest layer, so nothing is allocated
  // per call (an Eigen vector reallocates whenever a layer changes its width).
  thread_local std::vector<float> scratch_in, scratch_out;
  const auto width = static_cast<size_t>(
      std::max<Eigen::Index>(max_width_, static_cast<Eigen::Index>(features.size())));
  if (scratch_in.size() < width) {
    scratch_in.resize(width);
    scratch_out.resize(width);
  }
  float* in = scratch_in.data();
  float* next = scratch_out.data();
  std::copy(features.begin(), features.end(), in);
  auto n = static_cast<Eigen::Index>(features.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DenseLayer& layer = layers_[i];
    Eigen::Map<Eigen::VectorXf> b(next, layer.bias.size());
    b = layer.bias;
    b.noalias() += layer.weight * Eigen::Map<const Eigen::VectorXf>(in, n);
    if (i + 1 < layers_.size()) b = b.cwiseMax(0.0f);
    std::swap(in, next);
    n = layer.bias.size();
  }
  for (Eigen::Index k = 0; k < n; ++k) out[k] = 1.0f / (1.0f + std::exp(-in[k]));
}

}  // namespace kvlearn
