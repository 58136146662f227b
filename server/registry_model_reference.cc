#include "server/registry_model_reference.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/model_registry.h"

namespace kvlearn {

bool IsRegistryReference(std::string_view model) {
  return model.starts_with(kRegistryReferencePrefix);
}

absl::StatusOr<std::string> ResolveRegistryReference(const std::string& reference,
                                                     const std::string& data_dir) {
  std::string what = reference.substr(kRegistryReferencePrefix.size());
  int version = 0;
  const bool serving = what == "serving";
  if (what.starts_with('v')) what.erase(0, 1);
  if (!serving && (!absl::SimpleAtoi(what, &version) || version <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", reference, "' names no registry version: write registry:serving or registry:vN"));
  }
  auto registry = ModelRegistry::Open(data_dir);
  if (!registry.ok()) return registry.status();
  if (serving) {
    if (!registry->serving().has_value()) return std::string();
    version = *registry->serving();
  }
  auto entry = registry->Check(version);
  if (!entry.ok()) return entry.status();
  return registry->PathOf(**entry);
}

}  // namespace kvlearn
