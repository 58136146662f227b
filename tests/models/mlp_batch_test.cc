// MlpModel::PredictBatch against Predict, block by block: the batch must give
// the very same floats (the learned policy scores a request's blocks in one
// batch and its decisions must not move), for batch sizes around the vector
// width, narrow and wide layers (Eigen sums inputs in blocks from 128 on),
// and inputs spread over the normalisation's range; the SSE way and the AVX
// one (where the CPU has it) give the same floats too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "models/mlp_model.h"

namespace kvlearn {
namespace {

std::shared_ptr<const MlpModel> RandomModel(std::vector<int> widths, std::mt19937& rng) {
  std::normal_distribution<float> weight(0.0f, 0.4f);
  std::vector<DenseLayer> layers;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    DenseLayer layer{Eigen::MatrixXf(widths[l + 1], widths[l]), Eigen::VectorXf(widths[l + 1])};
    for (float& w : layer.weight.reshaped()) w = weight(rng);
    for (float& b : layer.bias) b = weight(rng);
    layers.push_back(std::move(layer));
  }
  ModelMetadata meta;
  for (int j = 0; j < widths.front(); ++j) {
    meta.feature_mean.push_back(weight(rng));
    meta.feature_std.push_back(0.5f + std::abs(weight(rng)));
  }
  for (int k = 0; k < widths.back(); ++k) meta.horizons_seconds.push_back(10.0 * (k + 1));
  auto model = MlpModel::Create(std::move(layers), std::move(meta), "random");
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

void ExpectBatchIsPredict(const MlpModel& model, size_t inputs, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> feature(0.0f, 3.0f);
  std::vector<float> x(n * inputs);
  for (float& v : x) v = feature(rng);
  const size_t k = model.num_outputs();
  std::vector<float> batch(n * k), sse(n * k), one(k);
  model.PredictBatch(x, n, batch);
  model.PredictBatchOn(/*avx=*/false, x, n, sse);
  EXPECT_EQ(std::memcmp(batch.data(), sse.data(), batch.size() * sizeof(float)), 0)
      << "SSE and " << (MlpModel::CpuHasAvx() ? "AVX" : "SSE") << " differ for " << n;
  for (size_t s = 0; s < n; ++s) {
    model.Predict(std::span<const float>(x).subspan(s * inputs, inputs), one);
    for (size_t i = 0; i < k; ++i) {
      // Bitwise: equal floats are not enough if one is -0 (it is not here).
      EXPECT_EQ(std::memcmp(&batch[s * k + i], &one[i], sizeof(float)), 0)
          << "block " << s << " of " << n << ", output " << i << ": " << batch[s * k + i] << " vs "
          << one[i];
    }
  }
}

TEST(MlpBatchTest, SameFloatsAsPredictForTheShippedShape) {
  std::mt19937 rng(1);
  const auto model = RandomModel({33, 32, 32, 7}, rng);
  for (size_t n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 23, 64})
    ExpectBatchIsPredict(*model, 33, n, rng);
}

TEST(MlpBatchTest, SameFloatsAsPredictForOddAndWideLayers) {
  std::mt19937 rng(2);
  // 130 and 300 inputs: Eigen sums them in column blocks; 5 and 67 rows: its
  // packet tails.
  for (const std::vector<int>& widths :
       {std::vector<int>{130, 67, 5}, std::vector<int>{300, 9, 1}, std::vector<int>{3, 1}}) {
    const auto model = RandomModel(widths, rng);
    for (size_t n : {1, 4, 13}) ExpectBatchIsPredict(*model, widths.front(), n, rng);
  }
}

TEST(MlpBatchTest, EmptyBatchWritesNothing) {
  std::mt19937 rng(3);
  const auto model = RandomModel({4, 3, 2}, rng);
  std::vector<float> out;
  model->PredictBatch({}, 0, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kvlearn
