// "kvlearn-cars": the KVLearn retention rule (Liu, Yu, Jiang, Wang, Wu, "To
// Keep or Not to Keep: Learning KV Cache Retention in Disaggregated LLM
// Serving Systems", SYSTOR '26), as a baseline next to our own learned policy.
// A tiny MLP trained online predicts whether a block is reused within a
// horizon H; a computed block is kept if its cost-aware retention score
//   CARS = P * (R - T) - U
// beats a threshold theta that a PI controller moves with pool occupancy.
//
// This class composes the parts in policies/kvlearn_cars/: the model inputs
// (model_inputs.h), their normalisation (running_normalizer.h), the network
// (online_mlp.h), its labels (reuse_labels.h) and replay buffer
// (replay_buffer.h), the holding cost U (holding_cost.h) and the threshold
// controller (pi_threshold.h). Each part's header explains its own choices;
// kvlearn_cars_policy.cc gives the sources, the protocol, H, the occupancy
// the controller reads and eviction.
//
// The class is public so that tests can watch the controller, the exploration
// and the labels; everyone else builds it through CreatePolicy("kvlearn-cars").
// Not thread-safe: one object per pool, like every RetentionPolicy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "policies/kvlearn_cars/holding_cost.h"
#include "policies/kvlearn_cars/model_inputs.h"
#include "policies/kvlearn_cars/online_mlp.h"
#include "policies/kvlearn_cars/pi_threshold.h"
#include "policies/kvlearn_cars/replay_buffer.h"
#include "policies/kvlearn_cars/reuse_labels.h"
#include "policies/kvlearn_cars/running_normalizer.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_factory.h"

namespace kvlearn {

struct KvlearnCarsOptions {
  // Label horizon H: a block counts as reused if it is hit within H of its
  // admission (or of its previous hit). See the .cc for why 300 s.
  double horizon_s = 300;

  // Threshold controller (theta is in units of the mean block recompute cost;
  // see pi_threshold.h).
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
  // Everything above the options: the keys, the access history, the
  // normaliser, the network, the replay buffer, the open label windows, the
  // holding cost, the controller, the exploration stream, the last scoring,
  // the clocks and the counters (kvlearn_cars_state.cc).
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override;
  absl::Status LoadState(PolicyStateReader& in) override;

  // Current threshold, ms of recompute, and in mean-recompute units.
  double theta_ms() const { return threshold_.theta() * mean_recompute_ms_; }
  double theta_scaled() const { return threshold_.theta(); }
  // What the controller currently reads as occupancy.
  double ControlledOccupancy() const;
  const Counters& counters() const { return counters_; }

 private:
  using Input = OnlineMlp::Input;

  // Extracts b's features now (into raw_), updates the running statistics and
  // returns the predicted reuse probability P.
  float Score(BlockIndex b);
  double Cars(BlockIndex b, float p) const;
  // Opens b's label window with the features and P just scored.
  void Arm(BlockIndex b, float p);
  // Learns from a closed label window: replay buffer, counters, observer, and
  // a training batch every labels_per_batch labels.
  void Learn(const ReuseLabels::Label& label);
  void ExpireWindows();
  void TrainBatch();

  KvlearnCarsOptions options_;
  AccessHistory history_;
  FeatureExtractor extractor_;

  RunningNormalizer<kCarsInputs> normalizer_;
  OnlineMlp model_;
  ReplayBuffer replay_;
  uint32_t labels_since_batch_ = 0;
  ReuseLabels labels_;
  HoldingCost holding_cost_;
  PiThreshold threshold_;
  uint64_t explore_rng_;

  // The block ShouldAdmit scored last, for OnInsert.
  CarsRawInputs raw_{};
  BlockIndex scored_block_ = kNoBlock;
  float scored_p_ = 0;

  // theta's unit: moving average of scored blocks' recompute cost, ms.
  double mean_recompute_ms_ = 0;
  uint64_t scored_ = 0;
  int64_t now_ms_ = 0;
  int64_t last_control_ms_ = -1;
  Counters counters_;
};

std::unique_ptr<RetentionPolicy> MakeKvlearnCarsPolicy(const PolicyEnv& env);

}  // namespace kvlearn
