#include "server/model_directory.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace fs = std::filesystem;

absl::StatusOr<ModelDirectory> ModelDirectory::Open(const std::string& dir) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  if (ec || !fs::is_directory(canonical, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-dir: ", dir, " is not an existing directory"));
  }
  return ModelDirectory(canonical.string());
}

absl::StatusOr<std::string> ModelDirectory::Resolve(const std::string& requested) const {
  if (requested.empty()) return absl::InvalidArgumentError("path: empty");
  const fs::path dir(canonical_);
  const fs::path joined = fs::path(requested).is_absolute() ? fs::path(requested) : dir / requested;
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(joined, ec);
  // Unresolvable (a component it may not search): judged by its text alone,
  // which can only refuse more.
  if (ec) resolved = joined.lexically_normal();
  const auto [dir_end, path_end] =
      std::mismatch(dir.begin(), dir.end(), resolved.begin(), resolved.end());
  const bool inside = dir_end == dir.end() && path_end != resolved.end() && !ec;
  if (!inside) {
    return absl::PermissionDeniedError(
        absl::StrCat("path: '", requested, "' is outside the server's --model-dir"));
  }
  return resolved.string();
}

}  // namespace kvlearn
