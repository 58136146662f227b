#include "server/model_loader.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::StatusOr<std::shared_ptr<const LearnedModel>> LoadModelForServing(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("path: empty");
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat("path: model file ", path, " does not exist"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("path: model file ", path, " is not a regular file"));
  }
  return LearnedModel::Load(path);
}

}  // namespace kvlearn
