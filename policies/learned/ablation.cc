#include "policies/learned/ablation.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(LearnedPart::kCount)> kNames = {
    "gdsf-expert",    "fallback", "space-price", "calibration",   "ledger",
    "curve-eviction", "guard",    "arc-expert",  "served-shares",
};

}  // namespace

std::string_view LearnedPartName(LearnedPart part) { return kNames[static_cast<size_t>(part)]; }

std::string JoinedLearnedPartNames() {
  std::string joined;
  for (const std::string_view name : kNames) {
    if (!joined.empty()) joined += ", ";
    joined.append(name);
  }
  return joined;
}

absl::StatusOr<LearnedAblation> ParseLearnedAblation(std::string_view list) {
  LearnedAblation ablation;
  while (!list.empty()) {
    const size_t comma = std::min(list.find(','), list.size());
    std::string_view slug = list.substr(0, comma);
    list.remove_prefix(std::min(comma + 1, list.size()));
    while (!slug.empty() && slug.front() == ' ') slug.remove_prefix(1);
    while (!slug.empty() && slug.back() == ' ') slug.remove_suffix(1);
    if (slug.empty()) continue;
    size_t i = 0;
    while (i < kNames.size() && kNames[i] != slug) ++i;
    if (i == kNames.size()) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(kLearnedAblateVariable),
                                                     ": unknown part '", std::string(slug),
                                                     "' (known: ", JoinedLearnedPartNames(), ")"));
    }
    ablation.TurnOff(static_cast<LearnedPart>(i));
  }
  return ablation;
}

absl::StatusOr<LearnedAblation> LearnedAblationFromEnvironment() {
  const char* list = std::getenv(std::string(kLearnedAblateVariable).c_str());
  return ParseLearnedAblation(list == nullptr ? "" : list);
}

}  // namespace kvlearn
