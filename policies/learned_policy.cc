// "learned": recency eviction with a learned, cost-aware admission filter.
//
// At every request the policy records the chain in its AccessHistory and
// scores each block once, on features taken before anything is evicted for
// that request (the learner records at the same point, so training and
// serving see the same vectors). The model gives P(next use within H) for a
// ladder of horizons H; the policy reads it at H = the pool's current
// eviction age (how long evicted blocks had gone unused, moving average),
// interpolating in log-time between rungs: "will this block be used again
// before the pool would drop it anyway?". Before the first eviction the
// longest horizon is used.
//
// Admission: a computed block is copied into the pool only if
//   P * (R - T) > T
// i.e. the expected saving (recompute R avoided, load T paid on the hit)
// beats the transfer that admitting costs now; and, when the pool is full,
// only if the leaf it would displace was last used strictly earlier (never
// churn blocks of the same instant). The threshold is the cost model's
// break-even, not a constant fitted to a trace. (We also tried requiring
// P > 1/2 on top: it refused most deep blocks and lost a third of the hits.)
//
// Eviction: the least recently used leaf (LeafOrderedPolicy keyed by the
// request time, deeper first on ties). We measured GreedyDual keys on the
// expected saving per byte (P * (R - T) / bytes, aged by inflation) and a
// "time to live" key (last use + P * H): both lost hits against plain
// recency on the shipped trace, because the model's probabilities are
// sharpest at admission time and go stale while a block sits in the pool; a
// heap of fixed keys cannot refresh them, and re-scoring sampled candidates
// at each eviction costs ~20 inferences per eviction, far from the 1M
// accesses/s budget. Admission rules that compare the newcomer with what it
// displaces (the victim re-scored, or a price per byte from recent regrets or
// hit savings) froze the pool: a block's own marginal R makes deep stale
// blocks look valuable, while a shallow block, cheap on its own, is what
// every hit on its descendants needs.
//
// The model is swappable at run time (SwapModel).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "models/learned_model.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_factory.h"

namespace kvlearn {
namespace {

class LearnedPolicy final : public LeafOrderedPolicy {
 public:
  LearnedPolicy(const PolicyEnv& env, std::shared_ptr<const LearnedModel> model)
      : LeafOrderedPolicy(env),
        history_(env.catalog),
        extractor_(env.features),
        model_(std::move(model)),
        feature_sink_(env.feature_sink) {}

  std::string_view name() const override { return "learned"; }

  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) override {
    history_.Record(chain, access.time_ms);
    history_.RecordEvictions(pool_.evictions());
    now_ms_ = access.time_ms;
    if (admit_.size() < catalog_.size()) admit_.resize(catalog_.size(), kUnscored);
    for (const BlockIndex b : chain) admit_[b] = Score(b, access.request, true);
  }

  void OnHit(BlockIndex b, const AccessInfo&) override { Rekey(b, KeyFor(b)); }
  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) override {
    // The simulator announces every block in a request's chain before asking,
    // but the sidecar may be asked about a block no request_arrival named (a
    // node that sends none, a pool of another tier, a candidate outside the
    // chain): score such a block now, on what is known of it, rather than
    // read past the end of admit_.
    if (admit_.size() < catalog_.size()) admit_.resize(catalog_.size(), kUnscored);
    if (admit_[b] == kUnscored) admit_[b] = Score(b, access.request, false);
    if (admit_[b] != kAdmit) return false;
    if (pool_.free_bytes() >= catalog_[b].bytes) return true;
    const BlockIndex victim = SelectVictim();
    return victim != kNoBlock && EvictsBefore(KeyOf(victim), KeyFor(b));
  }
  void OnInsert(BlockIndex b, const AccessInfo&) override { Track(b, KeyFor(b)); }

  void OnEvict(BlockIndex b) override {
    const BlockHistory& h = history_.Of(b);
    if (h.kept > 0) {
      const double idle_s = static_cast<double>(now_ms_ - h.times_ms[0]) / 1000.0;
      eviction_age_s_ = eviction_age_s_ < 0 ? idle_s : 0.99 * eviction_age_s_ + 0.01 * idle_s;
    }
    LeafOrderedPolicy::OnEvict(b);
  }

  absl::Status SwapModel(std::shared_ptr<const LearnedModel> model) override {
    if (auto s = CheckModelFits(model.get()); !s.ok()) return s;
    model_ = std::move(model);
    return absl::OkStatus();
  }

 private:
  // Admission decision of a block, as stored in admit_.
  static constexpr uint8_t kUnscored = 0, kRefuse = 1, kAdmit = 2;

  // Decides b on its features at now_ms_; `record` hands the features to the
  // learner's sink (only for blocks of an announced request, as in training).
  uint8_t Score(BlockIndex b, uint32_t request, bool record) {
    std::array<float, kNumFeatures> x;
    probabilities_.resize(model_->num_outputs());
    extractor_.Extract(b, now_ms_, catalog_, history_, pool_, x);
    if (record && feature_sink_) feature_sink_(b, request, x);
    model_->Predict(x, probabilities_);
    const double p = ReuseBeforeEviction();
    const BlockMeta& m = catalog_[b];
    const double t_ms = extractor_.TransferMs(m);
    return p * (m.recompute_ms - t_ms) > t_ms ? kAdmit : kRefuse;
  }

  OrderKey KeyFor(BlockIndex b) const {
    return {static_cast<double>(now_ms_), 0, catalog_[b].depth};
  }

  // probabilities_ read at the eviction age, linear in log-time between rungs.
  double ReuseBeforeEviction() const {
    const std::vector<double>& h = model_->metadata().horizons_seconds;
    const std::vector<float>& p = probabilities_;
    if (eviction_age_s_ < 0 || eviction_age_s_ >= h.back()) return p.back();
    if (eviction_age_s_ <= h.front()) return p.front();
    size_t k = 1;
    while (h[k] < eviction_age_s_) ++k;
    const double w = std::log(eviction_age_s_ / h[k - 1]) / std::log(h[k] / h[k - 1]);  // in (0, 1]
    return (1 - w) * p[k - 1] + w * p[k];
  }

  AccessHistory history_;
  FeatureExtractor extractor_;
  std::shared_ptr<const LearnedModel> model_;
  FeatureSink feature_sink_;
  std::vector<float> probabilities_;
  std::vector<uint8_t> admit_;  // per block: kUnscored, or decided at its latest request
  double eviction_age_s_ = -1;  // < 0 until the first eviction
  int64_t now_ms_ = 0;
};

}  // namespace

// REQUIRES: env.model checked by CreatePolicy.
std::unique_ptr<RetentionPolicy> MakeLearnedPolicy(const PolicyEnv& env) {
  return std::make_unique<LearnedPolicy>(env, env.model);
}

}  // namespace kvlearn
