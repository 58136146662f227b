#include "server/experiment_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "models/learned_model.h"
#include "models/model_block_size.h"
#include "server/model_loader.h"
#include "server/registry_model_reference.h"

namespace kvlearn {
namespace {

// Loads `p.model` into `p.loaded_model`; errors start with `field`.
absl::Status LoadModel(ExperimentPolicy& p, const std::string& field, const std::string& path,
                       const ModelDirectory* model_dir, const std::string& data_dir,
                       uint32_t block_size) {
  if (p.model.empty()) return absl::OkStatus();
  const auto named = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(path, ": ", field, ": ", st.message()));
  };
  std::string file = p.model;
  if (IsRegistryReference(file)) {
    // The sidecar's own data directory: not subject to --model-dir.
    auto registered = ResolveRegistryReference(file, data_dir);
    if (!registered.ok()) return named(registered.status());
    if (registered->empty()) return absl::OkStatus();  // nothing serves yet
    file = *registered;
  } else if (model_dir != nullptr) {
    auto inside = model_dir->Resolve(file);
    if (!inside.ok()) return named(inside.status());
    file = *inside;
  } else if (std::filesystem::path(file).is_relative()) {
    file = (std::filesystem::path(path).parent_path() / file).string();
  }
  auto model = LoadModelForServing(file);
  if (!model.ok()) return named(model.status());
  if (auto st = CheckModelBlockSize((*model)->metadata(), block_size, file, "this sidecar counts");
      !st.ok()) {
    return named(absl::FailedPreconditionError(st.message()));
  }
  p.loaded_model = *std::move(model);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Experiment>> LoadExperimentFile(
    const std::string& path, const ModelDirectory* model_dir, const std::string& data_dir,
    uint32_t block_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--experiment: cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  auto x = ParseExperiment(text.str(), path);
  if (!x.ok()) return x.status();
  for (size_t i = 0; i < x->arms.size(); ++i) {
    if (auto st = LoadModel(x->arms[i], absl::StrCat("arms[", i, "].model"), path, model_dir,
                            data_dir, block_size);
        !st.ok()) {
      return st;
    }
  }
  for (size_t i = 0; i < x->shadows.size(); ++i) {
    if (auto st = LoadModel(x->shadows[i], absl::StrCat("shadows[", i, "].model"), path, model_dir,
                            data_dir, block_size);
        !st.ok()) {
      return st;
    }
  }
  return std::make_shared<const Experiment>(*std::move(x));
}

std::string DescribeArms(const Experiment& experiment) {
  std::string out;
  for (const ExperimentArm& a : experiment.arms) {
    absl::StrAppend(&out, out.empty() ? "" : ",", a.name, "=", a.policy,
                    a.loaded_model ? absl::StrCat(":", a.loaded_model->version()) : "");
  }
  return out;
}

}  // namespace kvlearn
