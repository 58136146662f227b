// OnlineMlp: see online_mlp.h.
#include "policies/kvlearn_cars/online_mlp.h"

#include <cmath>

#include "core/splitmix64.h"

namespace kvlearn {
namespace {

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

}  // namespace

OnlineMlp::OnlineMlp(uint64_t init_seed) {
  uint64_t init_rng = init_seed;
  const auto uniform = [&init_rng](float limit) {
    return static_cast<float>((2 * SplitMix64Uniform(init_rng) - 1) * limit);
  };
  const float limit1 = std::sqrt(6.0f / (kInputs + kHidden));
  for (int i = 0; i < kHidden; ++i) {
    for (int j = 0; j < kInputs; ++j) w1_(i, j) = uniform(limit1);
  }
  const float limit2 = std::sqrt(6.0f / (kHidden + 1));
  for (int i = 0; i < kHidden; ++i) w2_(i) = uniform(limit2);
  b1_.setZero();
}

float OnlineMlp::Forward(const Input& x, Hidden* hidden) const {
  // lazyProduct: a fixed 32x16 product inlined, not a call to Eigen's gemv.
  const Hidden h = (w1_.lazyProduct(x) + b1_).cwiseMax(0.0f);
  if (hidden != nullptr) *hidden = h;
  return Sigmoid(w2_.dot(h) + b2_);
}

void OnlineMlp::SgdStep(const Input& x, float label, float learning_rate) {
  Hidden h;
  const float p = Forward(x, &h);
  const float g = p - label;  // d(cross-entropy) / d(logit)
  const float lr = learning_rate;
  const Hidden dh = (g * w2_).cwiseProduct((h.array() > 0.0f).cast<float>().matrix());
  w2_ -= (lr * g) * h;
  b2_ -= lr * g;
  b1_ -= lr * dh;
  w1_.noalias() -= (lr * dh) * x.transpose();
}

}  // namespace kvlearn
