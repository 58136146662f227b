// Feature normalisation for an online model: running mean and variance of
// every vector observed, and the map x -> (x - mean) / sqrt(var + 1e-4),
// clipped to +-5, that the model's inputs go through.
//
// The moments are exact running moments (weight 1/n) for the first 10k
// vectors, then exponentially weighted with weight 1e-4, so the statistics
// follow slow drift (pool occupancy rises during warm up) instead of freezing
// on the early traffic. The map in use is not the moments themselves but a
// copy refreshed from them every 256 vectors, starting with the first: a
// vector scored now and the same vector replayed for training a little later
// go through the same map, and refreshing is cheap. The variance floor keeps
// a feature that has been constant so far (variance 0) from blowing up the
// first value that differs; the clip keeps one outlier from saturating the
// model.
//
// Header-only because it is a template over the vector's length (the policy
// uses 16; tests use short vectors whose statistics can be worked by hand).
// Not thread-safe.
#pragma once

#include <Eigen/Dense>
#include <cstdint>

#include "core/policy_state.h"

namespace kvlearn {

template <int kDims>
class RunningNormalizer {
 public:
  using Vector = Eigen::Matrix<float, kDims, 1>;

  static constexpr uint64_t kExactMomentSamples = 10'000;
  static constexpr float kDriftWeight = 1e-4f;
  static constexpr float kVarianceFloor = 1e-4f;
  static constexpr float kClip = 5;
  static constexpr uint64_t kRefreshEvery = 256;

  // Folds x into the running moments, and refreshes the map in use on the
  // 1st, 257th, 513th, ... vector.
  void Observe(const Vector& x) {
    ++observed_;
    const float w =
        observed_ <= kExactMomentSamples ? 1.0f / static_cast<float>(observed_) : kDriftWeight;
    const Vector delta = x - mean_;
    mean_ += w * delta;
    var_ = (1 - w) * (var_ + w * delta.cwiseProduct(delta));
    if (observed_ % kRefreshEvery == 1) {
      map_mean_ = mean_;
      map_scale_ = (var_.array() + kVarianceFloor).rsqrt().matrix();
    }
  }

  // x through the map in use. Before the first Observe the map is the
  // identity (then clipped).
  Vector Normalise(const Vector& x) const {
    return ((x - map_mean_).array() * map_scale_.array()).cwiseMax(-kClip).cwiseMin(kClip).matrix();
  }

  // The moments and the map in use, for snapshots (core/policy_state.h).
  void Save(PolicyStateWriter& out) const {
    out.Varint(observed_);
    for (const Vector* v : {&mean_, &var_, &map_mean_, &map_scale_}) {
      out.Floats({v->data(), static_cast<size_t>(kDims)});
    }
  }
  void Load(PolicyStateReader& in) {
    observed_ = in.Varint("normalizer count");
    for (Vector* v : {&mean_, &var_, &map_mean_, &map_scale_}) {
      in.Floats("normalizer moments", {v->data(), static_cast<size_t>(kDims)});
    }
  }

  uint64_t observed() const { return observed_; }
  // The running moments (population variance), not the map in use.
  const Vector& mean() const { return mean_; }
  const Vector& variance() const { return var_; }

 private:
  uint64_t observed_ = 0;
  Vector mean_ = Vector::Zero();
  Vector var_ = Vector::Ones();
  // The map in use: (x - map_mean_) * map_scale_.
  Vector map_mean_ = Vector::Zero();
  Vector map_scale_ = Vector::Ones();
};

}  // namespace kvlearn
