// The learned model's inference over a request's blocks: one Predict per
// block against one PredictBatch for all of them (learned-model scores a
// request's chain in one batch). The network has the shape `kvlearn train`
// writes (the schema's inputs, 32, 32, 7 horizons), random weights; the
// argument is the number of blocks. Items/s: blocks scored per second.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "features/feature_schema.h"
#include "models/mlp_model.h"

namespace kvlearn {
namespace {

std::shared_ptr<const MlpModel> TrainShapedModel() {
  std::mt19937 rng(7);
  std::normal_distribution<float> weight(0.0f, 0.3f);
  std::vector<DenseLayer> layers;
  int width = kNumFeatures;
  for (const int out : {32, 32, 7}) {
    DenseLayer l{Eigen::MatrixXf(out, width), Eigen::VectorXf(out)};
    for (float& w : l.weight.reshaped()) w = weight(rng);
    for (float& b : l.bias) b = weight(rng);
    layers.push_back(std::move(l));
    width = out;
  }
  ModelMetadata meta;
  meta.feature_mean.assign(kNumFeatures, 0.0f);
  meta.feature_std.assign(kNumFeatures, 1.0f);
  for (int k = 0; k < 7; ++k) meta.horizons_seconds.push_back(30.0 * (k + 1));
  return *MlpModel::Create(std::move(layers), std::move(meta), "bench");
}

std::vector<float> RandomFeatures(size_t blocks) {
  std::mt19937 rng(11);
  std::normal_distribution<float> feature(0.0f, 2.0f);
  std::vector<float> x(blocks * kNumFeatures);
  for (float& v : x) v = feature(rng);
  return x;
}

void BM_PredictEachBlock(benchmark::State& state) {
  const auto model = TrainShapedModel();
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> x = RandomFeatures(n);
  std::vector<float> out(n * model->num_outputs());
  const std::span<const float> all(x);
  const std::span<float> curves(out);
  for (auto _ : state) {
    for (size_t s = 0; s < n; ++s) {
      model->Predict(all.subspan(s * kNumFeatures, kNumFeatures),
                     curves.subspan(s * model->num_outputs(), model->num_outputs()));
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_PredictEachBlock)->Arg(1)->Arg(8)->Arg(23)->Arg(64);

void BM_PredictBatch(benchmark::State& state) {
  const auto model = TrainShapedModel();
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> x = RandomFeatures(n);
  std::vector<float> out(n * model->num_outputs());
  for (auto _ : state) {
    model->PredictBatch(x, n, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_PredictBatch)->Arg(1)->Arg(8)->Arg(23)->Arg(64);

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
