// Save and Load of kvlearn-cars' parts (core/policy_state.h): what each
// learned or counted online, so a snapshot's restart continues it exactly.
#include <algorithm>

#include "policies/kvlearn_cars/holding_cost.h"
#include "policies/kvlearn_cars/online_mlp.h"
#include "policies/kvlearn_cars/pi_threshold.h"
#include "policies/kvlearn_cars/replay_buffer.h"
#include "policies/kvlearn_cars/reuse_labels.h"

namespace kvlearn {

void OnlineMlp::Save(PolicyStateWriter& out) const {
  out.Floats({w1_.data(), static_cast<size_t>(w1_.size())});
  out.Floats({b1_.data(), static_cast<size_t>(b1_.size())});
  out.Floats({w2_.data(), static_cast<size_t>(w2_.size())});
  out.Float(b2_);
}

void OnlineMlp::Load(PolicyStateReader& in) {
  in.Floats("mlp weights", {w1_.data(), static_cast<size_t>(w1_.size())});
  in.Floats("mlp weights", {b1_.data(), static_cast<size_t>(b1_.size())});
  in.Floats("mlp weights", {w2_.data(), static_cast<size_t>(w2_.size())});
  b2_ = in.Float("mlp weights");
}

void ReplayBuffer::Save(PolicyStateWriter& out) const {
  out.Varint(draw_rng_);
  out.Varint(oldest_);
  out.Varint(samples_.size());
  for (const LabelledInputs& s : samples_) {
    out.Floats(s.inputs);
    out.Float(s.label);
  }
}

void ReplayBuffer::Load(PolicyStateReader& in) {
  draw_rng_ = in.Varint("replay draw stream");
  const uint64_t oldest = in.Varint("replay position");
  const uint64_t n = in.Count("replay samples", 4 * (kCarsInputs + 1));
  if (in.ok() && (n > capacity_ || (oldest > 0 && oldest >= n))) {
    in.Fail("replay samples: more than the capacity, or a position past them");
  }
  samples_.clear();
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    LabelledInputs s;
    in.Floats("replay sample", s.inputs);
    s.label = in.Float("replay label");
    samples_.push_back(s);
  }
  oldest_ = in.ok() ? oldest : 0;
  if (!in.ok()) samples_.clear();
}

void ReuseLabels::Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
  std::vector<Opening> live;
  for (size_t i = head_; i < openings_.size(); ++i) {
    const Opening& o = openings_[i];
    if (open_[o.block] && generation_[o.block] == o.generation &&
        Renumbered(renumber, o.block) != kNoBlock) {
      live.push_back(o);
    }
  }
  out.Varint(live.size());
  for (const Opening& o : live) {
    out.Varint(Renumbered(renumber, o.block));
    out.Signed(o.start_ms);
    out.Floats(inputs_[o.block]);
    out.Float(predicted_[o.block]);
  }
}

void ReuseLabels::Load(PolicyStateReader& in) {
  GrowToCatalog();
  const uint64_t n = in.Count("label windows", 2 + 4 * (kCarsInputs + 1));
  int64_t last_start = INT64_MIN;
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const BlockIndex b = in.Block("label window");
    const int64_t start = in.Signed("label window start");
    if (!in.ok()) break;
    if (b >= open_.size() || open_[b] || start < last_start) {
      in.Fail("label windows: a block twice, or out of time order");
      break;
    }
    last_start = start;
    in.Floats("label window inputs", inputs_[b]);
    predicted_[b] = in.Float("label window P");
    open_[b] = 1;
    open_bytes_ += catalog_[b].bytes;
    generation_[b] = 1;
    openings_.push_back({start, b, 1});
  }
}

void PiThreshold::Save(PolicyStateWriter& out) const {
  out.Double(integral_);
  out.Double(theta_);
  out.Bool(admitted_since_step_);
  out.Bool(refused_since_step_);
}

void PiThreshold::Load(PolicyStateReader& in) {
  integral_ = in.Double("threshold integral");
  theta_ = in.Double("threshold theta");
  admitted_since_step_ = in.Bool("threshold admissions");
  refused_since_step_ = in.Bool("threshold refusals");
}

void HoldingCost::Save(PolicyStateWriter& out) const {
  out.Double(saved_ms_per_s_);
  out.Signed(window_start_ms_);
  out.Double(window_saved_ms_);
  out.Double(idle_at_eviction_s_);
}

void HoldingCost::Load(PolicyStateReader& in) {
  saved_ms_per_s_ = in.Double("holding cost rate");
  window_start_ms_ = in.Signed("holding cost window");
  window_saved_ms_ = in.Double("holding cost window saving");
  idle_at_eviction_s_ = in.Double("holding cost idle time");
}

}  // namespace kvlearn
