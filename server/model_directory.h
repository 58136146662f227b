// The directory model files may be loaded from (--model-dir): ReloadModel
// (and --model at start) load only files inside it.
//
// A requested path, relative to the directory or absolute, is made canonical
// (symlinks resolved and ".." taken out as far as the path exists, the rest
// normalised as text) and must then lie strictly inside the directory's own
// canonical path. A path outside is refused with PERMISSION_DENIED saying
// only that: not whether it exists, nor its type or size.
//
// What it does not stop: someone who can write inside the directory can
// swap a checked file for a symlink before it is opened; the directory is the
// operator's.
//
// Thread-safety: immutable after Open.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kvlearn {

class ModelDirectory {
 public:
  // `dir` must be an existing directory (INVALID_ARGUMENT naming --model-dir).
  static absl::StatusOr<ModelDirectory> Open(const std::string& dir);

  // The canonical path `requested` names inside the directory.
  absl::StatusOr<std::string> Resolve(const std::string& requested) const;

  const std::string& path() const { return canonical_; }

 private:
  explicit ModelDirectory(std::string canonical) : canonical_(std::move(canonical)) {}
  std::string canonical_;
};

}  // namespace kvlearn
