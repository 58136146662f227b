// Writing model files (LibTorch): what `kvlearn train` writes and
// `LearnedModel::Load` reads (models/model_reader.cc, without LibTorch).
// A TorchScript archive whose forward(x) maps raw features [n, F] to
// probabilities [n, horizons] (normalisation included), plus the metadata as
// the extra file "kvlearn_metadata.json". Any TorchScript runtime can run it;
// kvlearn itself copies the weights into an Eigen MlpModel (models/mlp_model.h).
#pragma once

// IValue complete before torch/script.h: clang's C++20 mode (the fuzz build)
// instantiates std::vector<IValue> members eagerly.
#include <ATen/core/ivalue.h>
#include <torch/script.h>

#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/learned_model.h"
#include "models/mlp_model.h"
#include "models/model_metadata_json.h"

namespace kvlearn {

// Writes `layers` (un-normalised inputs; the normalisation is
// metadata.feature_mean / feature_std, applied first) and the metadata.
absl::Status SaveModelFile(const std::string& path, std::span<const DenseLayer> layers,
                           const ModelMetadata& metadata);

// The archive as LibTorch sees it (tests compare its forward with Eigen's).
// torch::jit::load compiles the TorchScript source stored in the file, which
// LibTorch's compiler does not survive for every damaged file: only for files
// kvlearn wrote. LearnedModel::Load compiles nothing and needs no LibTorch.
absl::StatusOr<torch::jit::Module> LoadTorchModule(const std::string& path);

}  // namespace kvlearn
