#include "models/model_judgement.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fnv1a.h"
#include "models/learned_model.h"
#include "models/mlp_model.h"

namespace kvlearn {
namespace {

void HashFloats(Fnv1a& hash, const float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    hash.Word(bits);
  }
}

}  // namespace

bool ModelJudgement::fit() const {
  if (pools.empty()) return false;
  for (const PoolJudgement& p : pools) {
    if (!p.fit()) return false;
  }
  return true;
}

std::string WeightsFingerprint(std::span<const DenseLayer> layers, const ModelMetadata& metadata) {
  Fnv1a hash;
  for (const DenseLayer& l : layers) {
    hash.Word(static_cast<uint64_t>(l.weight.rows()));
    hash.Word(static_cast<uint64_t>(l.weight.cols()));
    // Row-major, as the file stores w<i>.
    for (Eigen::Index r = 0; r < l.weight.rows(); ++r) {
      for (Eigen::Index c = 0; c < l.weight.cols(); ++c) {
        const float w = l.weight(r, c);
        HashFloats(hash, &w, 1);
      }
    }
    HashFloats(hash, l.bias.data(), static_cast<size_t>(l.bias.size()));
  }
  HashFloats(hash, metadata.feature_mean.data(), metadata.feature_mean.size());
  HashFloats(hash, metadata.feature_std.data(), metadata.feature_std.size());
  return absl::StrFormat("%016x", hash.value());
}

std::string JudgementText(const ModelJudgement& j) {
  std::string out;
  for (const PoolJudgement& p : j.pools) {
    absl::StrAppend(
        &out, out.empty() ? "" : "; ",
        absl::StrFormat("learned %.1f s vs lru %.1f s (%+.2f%%), best heuristic %s %.1f s%s at "
                        "pool %g",
                        p.learned_cost_s, p.lru_cost_s,
                        p.lru_cost_s > 0 ? 100 * (p.learned_cost_s / p.lru_cost_s - 1) : 0.0,
                        p.best_heuristic, p.best_heuristic_cost_s,
                        p.no_model_cost_s < 0
                            ? std::string()
                            : absl::StrFormat(", without a model %.1f s", p.no_model_cost_s),
                        p.pool_fraction));
  }
  return out;
}

std::string UnfitModelLine(const ModelMetadata& metadata, const std::string& model) {
  if (!metadata.judgement.has_value() || metadata.judgement->fit()) return "";
  return absl::StrCat("model ", model,
                      " is marked unfit (written with --force): on its validation split ",
                      JudgementText(*metadata.judgement),
                      "; it may cost more than lru: retrain it on more or newer traffic, or serve "
                      "lru or the heuristic named");
}

}  // namespace kvlearn
