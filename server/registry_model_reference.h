// An experiment arm's or shadow's model named through the data directory's
// model registry (server/model_registry.h) instead of by file:
//   "registry:serving"  the version registry.json says serves (none: the
//                       policy runs without a model, as with no "model")
//   "registry:v3"       version 3 ("registry:3" too)
// The sidecar resolves it at start and at every experiment reload, so
// `kvlearn model promote` (which moves registry.json's pointer, then asks for
// a reload) switches every arm naming "registry:serving".
//
// The registry lives in the sidecar's own --data-dir, so its files are not
// subject to --model-dir. A damaged entry (server/model_registry.h: bad JSON,
// a missing file, bytes that are not the registered checksum's) or a
// registry.json that does not parse is refused, naming it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvlearn {

inline constexpr std::string_view kRegistryReferencePrefix = "registry:";

// Whether `model` (as the experiment file writes it) names the registry.
bool IsRegistryReference(std::string_view model);

// The model file `reference` names in DATA_DIR's registry; empty for
// "registry:serving" when no version serves. INVALID_ARGUMENT for a
// reference that is neither form; the registry's own errors otherwise.
absl::StatusOr<std::string> ResolveRegistryReference(const std::string& reference,
                                                     const std::string& data_dir);

}  // namespace kvlearn
