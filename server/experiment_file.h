// Reads `kvlearn serve --experiment FILE` (server/experiment.h) and loads
// the model files its arms and shadows name: at start and at every reload
// (SIGHUP, ReloadModel with experiment set).
//
// A model path is taken inside --model-dir when the server has one
// (server/model_directory.h); without, a relative path is relative to the
// experiment file's directory. "registry:serving" or "registry:vN" names a
// version of the model registry in `data_dir` (server/registry_model_reference.h),
// looked up again at every reload. Every model is checked as --model is
// (server/model_loader.h, and its block size against the sidecar's).
// Errors name the file and the field ("exp.json: arms[1].model: ...").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/experiment.h"
#include "server/model_directory.h"

namespace kvlearn {

// `model_dir`: nullptr when the server has no --model-dir. `data_dir`: the
// sidecar's --data-dir, whose models/ holds the registry.
absl::StatusOr<std::shared_ptr<const Experiment>> LoadExperimentFile(
    const std::string& path, const ModelDirectory* model_dir, const std::string& data_dir,
    uint32_t block_size);

// "name=policy[:model version]" per arm, comma-separated: what a reload
// reports.
std::string DescribeArms(const Experiment& experiment);

}  // namespace kvlearn
