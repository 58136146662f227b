#include "core/cost_model.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvlearn {
namespace {

// Architecture facts from the models' published configs (config.json).
const std::array<ModelProfile, 3> kModels = {{
    {"llama3-8b", 32, 8, 128, 2, 8.03},
    {"llama3.3-70b", 80, 8, 128, 2, 70.6},
    {"qwen3-8b", 36, 8, 128, 2, 8.19},
}};

// a100: the KVLearn calibration. h100: the same model, alphas scaled by the
// A100/H100 ratios of HBM bandwidth (2.0 vs 3.35 TB/s) and dense BF16 peak
// (312 vs 989 TFLOP/s). Link bandwidths are per direction. Prefill nodes:
// enough that a Mooncake-like load (about 3 requests/s of 12k-token prompts,
// ~1 s of prefill each on an A100) does not queue without bound.
// Cluster fields: dense BF16 peak from the datasheets; MFU 0.5, typical of
// long-prompt prefill; HBM for KV = 80 GB x 0.88 (SGLang's default static
// memory fraction) - 16 GB of Llama-3-8B weights, about 54 GB; 256 GB of host
// DRAM per node for the second tier.
const std::array<HardwareProfile, 2> kHardware = {{
    {"a100", 0.026, 8e-6, 512, 8.03, 25.0, 25.0, 7.0, 2039.0, 16, 312.0, 0.5, 54.0, 256.0},
    {"h100", 0.026 * 2.0 / 3.35, 8e-6 * 312.0 / 989.0, 512, 8.03, 50.0, 50.0, 12.0, 3350.0, 8,
     989.0, 0.5, 54.0, 256.0},
}};

template <typename Profile, size_t N>
absl::StatusOr<Profile> FindProfile(const std::array<Profile, N>& all, std::string_view name,
                                    std::string_view what) {
  for (const auto& p : all) {
    if (p.name == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown ", std::string(what), " '", std::string(name), "' (known: ",
      absl::StrJoin(all, ", ", [](std::string* out, const Profile& p) { out->append(p.name); }),
      ")"));
}

}  // namespace

std::span<const ModelProfile> ModelProfiles() { return kModels; }
std::span<const HardwareProfile> HardwareProfiles() { return kHardware; }

absl::StatusOr<ModelProfile> FindModelProfile(std::string_view name) {
  return FindProfile(kModels, name, "model profile");
}
absl::StatusOr<HardwareProfile> FindHardwareProfile(std::string_view name) {
  return FindProfile(kHardware, name, "hardware profile");
}

CostModel::CostModel(ModelProfile model, HardwareProfile hardware)
    : model_(std::move(model)),
      hardware_(std::move(hardware)),
      scale_(model_.params_billions / hardware_.calibrated_params_billions) {}

double CostModel::RecomputeMs(uint64_t tokens) const {
  const double l = static_cast<double>(tokens);
  const double lx = hardware_.l_cross_tokens;
  const double over = l > lx ? l - lx : 0.0;
  const double ms =
      hardware_.alpha_bw_ms_per_token * l + hardware_.alpha_flop_ms_per_token2 * over * over;
  return ms * scale_;
}

}  // namespace kvlearn
