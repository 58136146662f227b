// "learned": cost-aware retention scored by the trained reuse model.
//
// At every request the policy records the chain in its AccessHistory and
// scores each block once, on features taken before anything is evicted for
// that request (so the learner, which records at the same point, sees the
// same vectors):
//   value(b) = P(next use within H) * max(R - T, 0) / bytes     [ms per MB]
// R = marginal recompute cost, T = load cost over the pool link, and H the
// model horizon closest (in log scale) to the pool's current eviction age
// (how long evicted blocks had gone unused, moving average): "will it be
// used again before the pool would drop it anyway?". Until the first
// eviction the longest horizon is used.
//
// Eviction is GreedyDual over leaves: key = L + value, where L (inflation)
// is the key of the last evicted block. L rises as the pool turns over, so a
// block not touched again ages out without recomputing every key; it plays
// the role of the holding cost (the price of a byte of pool over time).
//
// Admission: a computed block is kept only when the expected saving beats
// the cost of copying it in, P * (R - T) > T, and, if the pool is full, when
// its key beats the leaf it would displace. Both thresholds come from the
// cost model, none from a trace.
//
// The model is swappable at run time (SwapModel); keys already in the heap
// stay until their blocks are touched again.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "models/leaf_ordered_policy.h"
#include "models/learned_model.h"

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
    size_t head = HorizonHead();
    static const char* forced = getenv("KVLEARN_HEAD");
    if (forced) head = atoi(forced);
    static const int variant = getenv("KVLEARN_VARIANT") ? atoi(getenv("KVLEARN_VARIANT")) : 0;
    std::array<float, kNumFeatures> x;
    std::vector<float> p(model_->num_outputs());
    if (value_.size() < catalog_.size()) {
      value_.resize(catalog_.size());
      worth_copying_.resize(catalog_.size());
    }
    for (const BlockIndex b : chain) {
      extractor_.Extract(b, now_ms_, catalog_, history_, pool_, x);
      if (feature_sink_) feature_sink_(b, access.request, x);
      model_->Predict(x, p);
      const BlockMeta& m = catalog_[b];
      const double t_ms = extractor_.TransferMs(m);
      const double saving = p[head] * std::max(m.recompute_ms - t_ms, 0.0);
      value_[b] = m.bytes ? saving / (static_cast<double>(m.bytes) / 1e6) : 0;
      if (variant == 1) {  // rate: divide by restricted mean time to reuse
        const auto& hs = model_->metadata().horizons_seconds;
        double rmst = 0, prev_h = 0, prev_s = 1;
        for (size_t k = 0; k < hs.size(); ++k) {
          rmst += (hs[k] - prev_h) * (prev_s + (1 - p[k])) / 2;
          prev_h = hs[k];
          prev_s = 1 - p[k];
        }
        value_[b] = value_[b] / p[head] * 1000.0 / rmst;  // value per byte per second (scaled)
      }
      if (variant == 2) value_[b] = p[head];
      worth_copying_[b] = saving > t_ms;
    }
  }

  void OnHit(BlockIndex b, const AccessInfo&) override { Rekey(b, KeyFor(b)); }

  bool ShouldAdmit(BlockIndex b, const AccessInfo&) override {
    if (!worth_copying_[b]) return false;
    if (pool_.free_bytes() >= catalog_[b].bytes) return true;
    const BlockIndex victim = SelectVictim();
    return victim != kNoBlock && EvictsBefore(KeyOf(victim), KeyFor(b));
  }

  void OnInsert(BlockIndex b, const AccessInfo&) override { Track(b, KeyFor(b)); }

  void OnEvict(BlockIndex b) override {
    inflation_ = std::max(inflation_, KeyOf(b).primary);
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
  OrderKey KeyFor(BlockIndex b) const {
    return {inflation_ + value_[b], static_cast<double>(now_ms_), catalog_[b].depth};
  }

  size_t HorizonHead() const {
    const std::vector<double>& h = model_->metadata().horizons_seconds;
    if (eviction_age_s_ < 0) return h.size() - 1;
    const double target = std::log(std::max(eviction_age_s_, 1e-3));
    size_t best = 0;
    for (size_t k = 1; k < h.size(); ++k) {
      if (std::abs(std::log(h[k]) - target) < std::abs(std::log(h[best]) - target)) best = k;
    }
    return best;
  }

  AccessHistory history_;
  FeatureExtractor extractor_;
  std::shared_ptr<const LearnedModel> model_;
  FeatureSink feature_sink_;
  std::vector<double> value_;        // per block, from its latest request
  std::vector<uint8_t> worth_copying_;
  double inflation_ = 0;
  double eviction_age_s_ = -1;  // < 0 until the first eviction
  int64_t now_ms_ = 0;
};

}  // namespace

// REQUIRES: env.model checked by CreatePolicy.
std::unique_ptr<RetentionPolicy> MakeLearnedPolicy(const PolicyEnv& env) {
  return std::make_unique<LearnedPolicy>(env, env.model);
}

}  // namespace kvlearn
