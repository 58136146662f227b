// Checks, before any long work, that a command will be able to write its
// output file: so `train --out /nonexistent/m.pt` is refused at once instead
// of after every epoch. Only looks (access(2)); creates and truncates nothing.
// Stateless; safe from any thread.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {

// OK if `path` can be written: an existing writable file, or a new name in an
// existing writable directory. Otherwise the flag, the path and what to fix.
inline absl::Status CheckOutputWritable(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": is a directory: give a file name in it"));
  }
  if (fs::exists(p, ec)) {
    if (access(path.c_str(), W_OK) == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": exists and is not writable: choose another path"));
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": no directory ", dir.string(), ": create it first"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": directory ", dir.string(),
                                                   " is not writable: choose another path"));
  }
  return absl::OkStatus();
}

}  // namespace kvlearn
