// Loads a model file for the sidecar (start-up and ReloadModel): checks the
// path first so an operator's typo reads as one, then LearnedModel::Load
// (models/model_reader.cc). On failure the server keeps its current model.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/learned_model.h"

namespace kvlearn {

// Checks that `path` names a readable regular file (INVALID_ARGUMENT /
// NOT_FOUND naming the path), then loads and validates it.
absl::StatusOr<std::shared_ptr<const LearnedModel>> LoadModelForServing(const std::string& path);

}  // namespace kvlearn
