// A small learned model built in memory for tests that need one but do not
// test training: deterministic pseudo-random weights, schema of this build.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "features/feature_schema.h"
#include "models/mlp_model.h"
#include "models/model_judgement.h"

namespace kvlearn {

// The layers of MakeTestModel(seed): features -> 8 (ReLU) -> 2 (sigmoid).
inline std::vector<DenseLayer> TestModelLayers(uint64_t seed = 1) {
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  const auto next = [&state] {  // LCG in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
  };
  std::vector<DenseLayer> layers;
  int width = kNumFeatures;
  for (const int out : {8, 2}) {
    DenseLayer l;
    l.weight.resize(out, width);
    l.bias.resize(out);
    for (int r = 0; r < out; ++r) {
      for (int c = 0; c < width; ++c) l.weight(r, c) = next();
      l.bias[r] = next();
    }
    layers.push_back(std::move(l));
    width = out;
  }
  return layers;
}

// Its metadata: this build's schema, horizons 60 s and 600 s, identity
// normalisation.
inline ModelMetadata TestModelMetadata() {
  ModelMetadata meta;
  meta.schema_version = kFeatureSchemaVersion;
  meta.horizons_seconds = {60, 600};
  meta.feature_mean.assign(kNumFeatures, 0.0f);
  meta.feature_std.assign(kNumFeatures, 1.0f);
  return meta;
}

// TestModelMetadata() judged unfit on TestModelLayers(1): at pool 0.1 learned
// 110 s against lru 100 s and gdsf 95 s. Its training traffic: 2 requests/s,
// 4 blocks per prompt, reuse 0.5, 512-token blocks. Written as
// test_model_unfit.pt.
inline ModelMetadata TestModelUnfitMetadata() {
  ModelMetadata meta = TestModelMetadata();
  ModelJudgement j;
  j.first_request = 60;
  j.end_request = 80;
  PoolJudgement p;
  p.pool_fraction = 0.1;
  p.pool_bytes = 1000;
  p.learned_cost_s = 110;
  p.lru_cost_s = 100;
  p.best_heuristic = "gdsf";
  p.best_heuristic_cost_s = 95;
  j.pools = {p};
  j.weights_fingerprint = WeightsFingerprint(TestModelLayers(1), meta);
  meta.judgement = j;
  TrafficSummary t;
  t.requests = 60;
  t.request_rate_per_s = 2;
  t.mean_prompt_blocks = 4;
  t.block_reuse_ratio = 0.5;
  t.block_size_tokens = 512;
  meta.training_traffic = t;
  return meta;
}

inline std::shared_ptr<const LearnedModel> MakeTestModel(uint64_t seed = 1) {
  return *MlpModel::Create(TestModelLayers(seed), TestModelMetadata(), "test-model");
}

#ifdef KVLEARN_TEST_MODEL_DIR
// The model file of TestModelLayers(seed) (seed 1 or 2) with
// TestModelMetadata(), as `kvlearn train` writes models: written at build
// time (tests/models/write_test_models), so that a test needing a model file
// does not link LibTorch to write one.
inline std::string TestModelFile(uint64_t seed = 1) {
  return std::string(KVLEARN_TEST_MODEL_DIR) + "/test_model_" + std::to_string(seed) + ".pt";
}
// TestModelLayers(1) with TestModelUnfitMetadata().
inline std::string TestModelUnfitFile() {
  return std::string(KVLEARN_TEST_MODEL_DIR) + "/test_model_unfit.pt";
}

// Copies it to `path` (replacing what is there); false if that fails.
inline bool CopyTestModel(const std::string& path, uint64_t seed = 1) {
  std::error_code error;
  std::filesystem::copy_file(TestModelFile(seed), path,
                             std::filesystem::copy_options::overwrite_existing, error);
  return !error;
}
#endif

}  // namespace kvlearn
