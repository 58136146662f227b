#include "engine/kv_event.h"

#include "absl/strings/match.h"

namespace kvlearn {

std::string_view KvMediumName(KvMedium medium) {
  switch (medium) {
    case KvMedium::kUnspecified:
      return "unspecified";
    case KvMedium::kGpu:
      return "gpu";
    case KvMedium::kCpu:
      return "cpu";
    case KvMedium::kDisk:
      return "disk";
    case KvMedium::kOther:
      return "other";
  }
  return "other";
}

KvMedium ParseKvMedium(std::string_view name) {
  const auto is = [name](const char* want) {
    return absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()), want);
  };
  if (is("GPU") || is("HBM")) return KvMedium::kGpu;
  if (is("CPU") || is("DRAM")) return KvMedium::kCpu;
  if (is("DISK") || is("STORAGE") || is("SSD")) return KvMedium::kDisk;
  return KvMedium::kOther;
}

}  // namespace kvlearn
