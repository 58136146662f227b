// The kvlearn-cars reuse predictor (the paper's PRP): a 16 -> 32 -> 1
// multilayer perceptron, ReLU hidden layer and sigmoid output, giving the
// probability that a block is reused within the label horizon, and trained
// online one sample at a time by plain SGD on the binary cross-entropy.
//
// Inputs are expected already normalised (RunningNormalizer); which samples
// are trained on, and when, is the caller's business (ReplayBuffer). Weights
// start Xavier-uniform from a splitmix64 stream, biases at 0, and all
// arithmetic is in float on Eigen fixed-size types, so a given seed and a
// given sequence of steps always give the same weights.
//
// Not thread-safe.
#pragma once

#include <Eigen/Dense>
#include <cstdint>

#include "core/policy_state.h"
#include "policies/kvlearn_cars/model_inputs.h"

namespace kvlearn {

class OnlineMlp {
 public:
  static constexpr int kInputs = kCarsInputs;
  static constexpr int kHidden = 32;
  using Input = Eigen::Matrix<float, kInputs, 1>;

  // Xavier-uniform weights drawn from the splitmix64 stream seeded with
  // init_seed: the 32x16 first layer row by row, then the 32 output weights.
  explicit OnlineMlp(uint64_t init_seed);

  // P(reused), in (0, 1).
  float Predict(const Input& x) const { return Forward(x, nullptr); }

  // One SGD step with the given learning rate on the cross-entropy
  // -(label * log P + (1 - label) * log(1 - P)) of the single sample (x, label).
  void SgdStep(const Input& x, float label, float learning_rate);

  // The weights, for snapshots (core/policy_state.h; cars_state.cc).
  void Save(PolicyStateWriter& out) const;
  void Load(PolicyStateReader& in);

 private:
  using Hidden = Eigen::Matrix<float, kHidden, 1>;

  // P(reused) for x; stores the hidden activations in *hidden unless null.
  float Forward(const Input& x, Hidden* hidden) const;

  Eigen::Matrix<float, kHidden, kInputs> w1_;
  Hidden b1_;
  Hidden w2_;
  float b2_ = 0;
};

}  // namespace kvlearn
