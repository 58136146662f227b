// A model file's metadata, the archive's extra file kvlearn_metadata.json:
// written by SaveModelFile (models/model_file.h), read by LearnedModel::Load.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "models/learned_model.h"

namespace kvlearn {

inline constexpr char kMetadataFile[] = "kvlearn_metadata.json";

// The metadata as JSON (this build's feature names when it lists none).
std::string ModelMetadataJson(const ModelMetadata& metadata);

// Parses and checks it (fields present, horizons positive and increasing);
// INVALID_ARGUMENT naming `path` and the field otherwise.
absl::StatusOr<ModelMetadata> ParseModelMetadata(std::string_view json, const std::string& path);

// A JSON string's contents: quotes and backslashes escaped, control
// characters dropped (the model registry writes its files with it too).
std::string JsonEscaped(std::string_view text);

}  // namespace kvlearn
