// Loads a model file for the sidecar: the one place that depends on whether
// this build has learned-model support (the `kvlearn_learned` library with
// LearnedModel::Load). Without it, every load fails with FAILED_PRECONDITION
// after the file checks, so the server keeps serving its current policy.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/learned_model.h"

namespace kvlearn {

// Checks that `path` names a readable regular file (INVALID_ARGUMENT /
// NOT_FOUND naming the path), then loads and validates it.
absl::StatusOr<std::shared_ptr<const LearnedModel>> LoadModelForServing(const std::string& path);

// True when this build can load models at all.
bool HaveLearnedModelSupport();

}  // namespace kvlearn
