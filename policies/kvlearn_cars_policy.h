// "kvlearn-cars": the KVLearn retention rule (Liu, Yu, Jiang, Wang, Wu, "To
// Keep or Not to Keep: Learning KV Cache Retention in Disaggregated LLM
// Serving Systems", SYSTOR '26), as a baseline next to our own learned policy.
// A tiny MLP trained online predicts whether a block is reused within a
// horizon H; a computed block is kept if its cost-aware retention score
//   CARS = P * (R - T) - U
// beats a threshold theta that a PI controller moves with pool occupancy.
// The full rationale, and every choice made where the paper is silent, is in
// kvlearn_cars_policy.cc.
//
// The class is public so that tests can watch the controller, the exploration
// and the labels; everyone else builds it through CreatePolicy("kvlearn-cars").
// Not thread-safe: one object per pool, like every RetentionPolicy.
#pragma once

#include <Eigen/Dense>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "features/feature_schema.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_factory.h"

namespace kvlearn {

struct KvlearnCarsOptions {
  // Label horizon H: a block counts as reused if it is hit within H of its
  // admission (or of its previous hit). See the .cc for why 300 s.
  double horizon_s = 300;

  // Threshold controller (theta is in units of the mean block recompute cost).
  double target_occupancy = 0.85;
  double kp = 2.0;                      // per unit of occupancy error
  std::optional<double> ki_per_second;  // default kp / horizon_s
  double initial_integral = 0;          // starting theta, in mean-recompute units
  double theta_limit = 10;              // |theta| clamp, in mean-recompute units
  // The controller reads "live" occupancy (bytes of resident blocks used within
  // H) when true, raw used/capacity when false; see the .cc.
  bool live_occupancy = true;

  double exploration = 0.05;  // share of rule refusals admitted anyway
  uint64_t seed = 0x6b766c6561726eULL;

  // Online training.
  float learning_rate = 5e-3f;
  uint32_t replay_capacity = 20000;
  uint32_t labels_per_batch = 100;  // a batch runs after this many new labels
  uint32_t batch_size = 100;        // samples drawn (with replacement) per batch

  // Tests only: called when a label resolves, with the block, the reuse
  // probability the policy predicted when the label's window opened, and the
  // outcome.
  std::function<void(BlockIndex, float, bool)> label_observer;
};

class KvlearnCarsPolicy final : public LeafOrderedPolicy {
 public:
  static constexpr int kInputs = 16;
  static constexpr int kHidden = 32;
  // The schema features the model reads, in the paper's order (structural,
  // temporal, pool state); the .cc says which paper feature each stands for.
  static constexpr std::array<Feature, kInputs> kInputFeatures = {
      kPrefixTokensLog, kChildrenLog,   kDepth,        kBlockTokens,
      kRecomputeMsLog,  kBlockBytesLog, kDecayed1mLog, kDecayed10mLog,
      kDecayed1hLog,    kGap1Log,       kGap2Log,      kSubtreeAccessesLog,
      kAccessesLog,     kPoolOccupancy, kIsLeaf,       kEvictionRate};

  struct Counters {
    uint64_t decisions = 0;           // ShouldAdmit calls
    uint64_t rule_admits = 0;         // CARS > theta
    uint64_t rule_refusals = 0;       // CARS <= theta (explored or not)
    uint64_t exploration_admits = 0;  // refusals admitted anyway
    uint64_t labels = 0;
    uint64_t positive_labels = 0;
    uint64_t batches = 0;
  };

  explicit KvlearnCarsPolicy(const PolicyEnv& env, KvlearnCarsOptions options = {});

  std::string_view name() const override { return "kvlearn-cars"; }
  void OnRequest(std::span<const BlockIndex> chain, const AccessInfo& access) override;
  void OnHit(BlockIndex b, const AccessInfo& access) override;
  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) override;
  void OnInsert(BlockIndex b, const AccessInfo& access) override;
  void OnEvict(BlockIndex b) override;

  // Current threshold, ms of recompute, and in mean-recompute units.
  double theta_ms() const { return theta_scaled_ * mean_recompute_ms_; }
  double theta_scaled() const { return theta_scaled_; }
  // What the controller currently reads as occupancy.
  double ControlledOccupancy() const;
  const Counters& counters() const { return counters_; }

 private:
  using Input = Eigen::Matrix<float, kInputs, 1>;
  using Hidden = Eigen::Matrix<float, kHidden, 1>;
  using Raw = std::array<float, kInputs>;  // un-normalised model inputs
  struct Sample {
    Raw raw;
    float label = 0;
  };
  struct Expiry {
    int64_t start_ms;
    BlockIndex block;
    uint32_t generation;
  };

  void Grow(size_t n);
  // Extracts b's features now (into raw_), updates the running statistics and
  // returns the predicted reuse probability P.
  float Score(BlockIndex b);
  double HoldCostMs(const BlockMeta& m) const;
  double Cars(BlockIndex b, float p) const;
  // Opens b's label window with the features and P just scored.
  void Arm(BlockIndex b, float p);
  void Resolve(BlockIndex b, bool reused);
  void ExpireWindows();
  void UpdateController(double dt_s);
  void UpdateSavingRate();
  Input Normalise(const Raw& raw) const;
  float Forward(const Input& x, Hidden* hidden) const;
  void TrainBatch();
  void SgdStep(const Sample& s);

  KvlearnCarsOptions options_;
  AccessHistory history_;
  FeatureExtractor extractor_;
  int64_t horizon_ms_;
  double ki_per_second_;

  // Model: 16 -> 32 (ReLU) -> 1 (sigmoid), plus running normalisation.
  Eigen::Matrix<float, kHidden, kInputs> w1_;
  Hidden b1_;
  Hidden w2_;
  float b2_ = 0;
  Input mean_ = Input::Zero();
  Input var_ = Input::Ones();
  uint64_t observed_ = 0;
  // The map in use: (x - norm_mean_) * norm_scale_, refreshed from the
  // running moments every kRefreshEvery scored vectors.
  Input norm_mean_ = Input::Zero();
  Input norm_scale_ = Input::Ones();

  std::vector<Sample> replay_;
  size_t replay_next_ = 0;
  uint32_t labels_since_batch_ = 0;
  uint64_t train_rng_;
  uint64_t explore_rng_;

  // Per block: the open label window (features and P at its start).
  std::vector<Raw> window_raw_;
  std::vector<float> window_p_;
  std::vector<uint32_t> window_generation_;
  std::vector<uint8_t> window_open_;
  std::vector<Expiry> expiries_;  // FIFO by start time; stale entries skipped
  size_t expiries_head_ = 0;
  uint64_t live_bytes_ = 0;

  // The block ShouldAdmit scored last, for OnInsert.
  Raw raw_{};
  BlockIndex scored_block_ = kNoBlock;
  float scored_p_ = 0;

  // Cost-model state for U and theta.
  double mean_recompute_ms_ = 0;
  double saved_ms_per_s_ = -1;  // < 0 until the first rate window closes
  int64_t rate_window_start_ms_ = -1;
  double rate_window_saved_ms_ = 0;
  double idle_at_eviction_s_ = -1;  // moving average; < 0 before the first eviction
  double integral_;
  double theta_scaled_;
  int64_t now_ms_ = 0;
  int64_t last_control_ms_ = -1;
  bool admitted_since_control_ = false;
  bool refused_since_control_ = false;
  Counters counters_;
};

std::unique_ptr<RetentionPolicy> MakeKvlearnCarsPolicy(const PolicyEnv& env);

}  // namespace kvlearn
