#include "models/mlp_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
  for (const DenseLayer& l : layers) {
    // Rows past the layer's are zero weights: PredictBatch's sums of 8 rows
    // at a time then need no scalar tail, and what they sum is never read.
    const Eigen::Index rows = (l.weight.rows() + 7) / 8 * 8;
    Eigen::MatrixXf padded = Eigen::MatrixXf::Zero(rows, l.weight.cols());
    padded.topRows(l.weight.rows()) = l.weight;
    model->padded_width_ = std::max(model->padded_width_, rows);
    model->padded_weights_.push_back(std::move(padded));
  }
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

namespace {

// Eigen's column-major matrix-vector product (Predict's) sums each output's
// inputs in column blocks (all at once below 128 inputs): from zero, input
// j0 first, the block's sum then added to the result. The batch sums the
// same blocks in the same order, so its floats are Predict's.
Eigen::Index ProductColumnBlock(Eigen::Index rows, Eigen::Index cols) {
  if (cols < 128) return cols;
  return rows * static_cast<Eigen::Index>(sizeof(float)) < 32000 ? 16 : 4;
}

// Four floats in one SSE register (GCC's vector extension): lane by lane,
// the same multiplies and adds as scalars.
typedef float Float4 __attribute__((vector_size(16)));
Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One layer's pre-activations `out` (`width` per block, the bias already in)
// += W in, for the S blocks at `in` (`in_width` apart), rows [i0, i0 + 8) of
// W padded to a multiple of 8 rows, summing `step` columns at a time:
// 8 rows by S blocks of sums held in registers, each weight read once for
// all S.
template <int S>
void AddRows8(const Eigen::MatrixXf& w, Eigen::Index step, Eigen::Index i0, const float* in,
              Eigen::Index in_width, float* out, Eigen::Index width) {
  const Eigen::Index cols = w.cols();
  for (Eigen::Index j0 = 0; j0 < cols; j0 += step) {
    Float4 sum[S][2] = {};
    for (Eigen::Index j = j0; j < std::min(j0 + step, cols); ++j) {
      const float* wj = w.data() + j * w.rows() + i0;
      const Float4 w0 = Load4(wj), w1 = Load4(wj + 4);
      for (int s = 0; s < S; ++s) {
        const float x = in[s * in_width + j];
        const Float4 xs = {x, x, x, x};
        sum[s][0] += w0 * xs;
        sum[s][1] += w1 * xs;
      }
    }
    for (int s = 0; s < S; ++s) {
      float* o = out + s * width + i0;
      const Float4 lo = Load4(o) + sum[s][0], hi = Load4(o + 4) + sum[s][1];
      std::memcpy(o, &lo, sizeof(lo));
      std::memcpy(o + 4, &hi, sizeof(hi));
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
// AddRows8 in one AVX register of 8 floats, for CPUs that have AVX: each
// lane the same multiply and add, so the same floats (AVX has no fused
// multiply-add to contract them into; that is FMA, not enabled here).
template <int S>
__attribute__((target("avx"))) void AddRows8Avx(const Eigen::MatrixXf& w, Eigen::Index step,
                                                Eigen::Index i0, const float* in,
                                                Eigen::Index in_width, float* out,
                                                Eigen::Index width) {
  typedef float Float8 __attribute__((vector_size(32)));
  const Eigen::Index cols = w.cols();
  for (Eigen::Index j0 = 0; j0 < cols; j0 += step) {
    Float8 sum[S] = {};
    for (Eigen::Index j = j0; j < std::min(j0 + step, cols); ++j) {
      Float8 wj;
      std::memcpy(&wj, w.data() + j * w.rows() + i0, sizeof(wj));
      for (int s = 0; s < S; ++s) {
        const float x = in[s * in_width + j];
        const Float8 xs = {x, x, x, x, x, x, x, x};
        sum[s] += wj * xs;
      }
    }
    for (int s = 0; s < S; ++s) {
      Float8 o;
      std::memcpy(&o, out + s * width + i0, sizeof(o));
      o += sum[s];
      std::memcpy(out + s * width + i0, &o, sizeof(o));
    }
  }
}

#else
// No AVX off x86: the portable sums.
template <int S>
void AddRows8Avx(const Eigen::MatrixXf& w, Eigen::Index step, Eigen::Index i0, const float* in,
                 Eigen::Index in_width, float* out, Eigen::Index width) {
  AddRows8<S>(w, step, i0, in, in_width, out, width);
}
#endif

// One layer's sums for all n blocks, four at a time (`Avx`: with AddRows8Avx).
template <bool Avx>
void AddLayerSums(const Eigen::MatrixXf& w, Eigen::Index step, const float* in,
                  Eigen::Index in_width, float* out, Eigen::Index width, size_t n) {
  size_t s = 0;
  for (; s + 4 <= n; s += 4) {
    for (Eigen::Index i = 0; i < w.rows(); i += 8) {
      if constexpr (Avx) {
        AddRows8Avx<4>(w, step, i, in + s * in_width, in_width, out + s * width, width);
      } else {
        AddRows8<4>(w, step, i, in + s * in_width, in_width, out + s * width, width);
      }
    }
  }
  for (; s < n; ++s) {
    for (Eigen::Index i = 0; i < w.rows(); i += 8) {
      if constexpr (Avx) {
        AddRows8Avx<1>(w, step, i, in + s * in_width, in_width, out + s * width, width);
      } else {
        AddRows8<1>(w, step, i, in + s * in_width, in_width, out + s * width, width);
      }
    }
  }
}

}  // namespace

bool MlpModel::CpuHasAvx() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx");
  return has;
#else
  return false;
#endif
}

void MlpModel::PredictBatch(std::span<const float> features, size_t n, std::span<float> out) const {
  PredictBatchOn(CpuHasAvx(), features, n, out);
}

void MlpModel::PredictBatchOn(bool avx, std::span<const float> features, size_t n,
                              std::span<float> out) const {
  if (n == 0) return;
  // Activations block after block, max_width_ apart; per-thread scratch as
  // in Predict.
  thread_local std::vector<float> scratch_in, scratch_out;
  const auto inputs = static_cast<Eigen::Index>(features.size() / n);
  const Eigen::Index stride = std::max(padded_width_, inputs);
  if (scratch_in.size() < static_cast<size_t>(stride) * n) {
    scratch_in.resize(static_cast<size_t>(stride) * n);
    scratch_out.resize(static_cast<size_t>(stride) * n);
  }
  const float* in = features.data();
  Eigen::Index in_width = inputs;
  float* next = scratch_out.data();
  float* spare = scratch_in.data();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DenseLayer& layer = layers_[l];
    const Eigen::MatrixXf& w = padded_weights_[l];
    const Eigen::Index rows = layer.bias.size();
    const Eigen::Index step = ProductColumnBlock(rows, w.cols());
    for (size_t s = 0; s < n; ++s) {
      float* y = next + s * stride;
      std::copy_n(layer.bias.data(), rows, y);
      std::fill(y + rows, y + w.rows(), 0.0f);
    }
    if (avx) {
      AddLayerSums<true>(w, step, in, in_width, next, stride, n);
    } else {
      AddLayerSums<false>(w, step, in, in_width, next, stride, n);
    }
    if (l + 1 < layers_.size()) {
      for (size_t s = 0; s < n; ++s) {
        float* y = next + s * stride;
        for (Eigen::Index i = 0; i < rows; ++i) y[i] = std::max(y[i], 0.0f);
      }
    }
    in = next;
    in_width = stride;
    std::swap(next, spare);
  }
  const auto k = static_cast<size_t>(layers_.back().bias.size());
  for (size_t s = 0; s < n; ++s) {
    for (size_t i = 0; i < k; ++i) out[s * k + i] = 1.0f / (1.0f + std::exp(-in[s * stride + i]));
  }
}

}  // namespace kvlearn
