// KvlearnCarsPolicy::SaveState and LoadState (kvlearn_cars_policy.h); each
// part saves itself (policies/kvlearn_cars/cars_state.cc).
#include "policies/kvlearn_cars_policy.h"

namespace kvlearn {

absl::Status KvlearnCarsPolicy::SaveState(std::span<const BlockIndex> renumber,
                                          PolicyStateWriter& out) const {
  SaveOrder(renumber, out);
  history_.Save(renumber, pool_.evictions(), out);
  normalizer_.Save(out);
  model_.Save(out);
  replay_.Save(out);
  out.Varint(labels_since_batch_);
  labels_.Save(renumber, out);
  holding_cost_.Save(out);
  threshold_.Save(out);
  out.Varint(explore_rng_);
  out.Floats(raw_);
  out.Varint(OptionalBlock(renumber, scored_block_));
  out.Float(scored_p_);
  out.Double(mean_recompute_ms_);
  out.Varint(scored_);
  out.Signed(now_ms_);
  out.Signed(last_control_ms_);
  for (uint64_t n : {counters_.decisions, counters_.rule_admits, counters_.rule_refusals,
                     counters_.exploration_admits, counters_.labels, counters_.positive_labels,
                     counters_.batches}) {
    out.Varint(n);
  }
  return absl::OkStatus();
}

absl::Status KvlearnCarsPolicy::LoadState(PolicyStateReader& in) {
  LoadOrder(in);
  history_.Load(in, pool_.evictions());
  normalizer_.Load(in);
  model_.Load(in);
  replay_.Load(in);
  labels_since_batch_ = static_cast<uint32_t>(in.Bounded("cars labels", UINT32_MAX));
  labels_.Load(in);
  holding_cost_.Load(in);
  threshold_.Load(in);
  explore_rng_ = in.Varint("cars exploration stream");
  in.Floats("cars last inputs", raw_);
  scored_block_ = OptionalBlock(in, "cars last scored block");
  scored_p_ = in.Float("cars last P");
  mean_recompute_ms_ = in.Double("cars mean recompute");
  scored_ = in.Varint("cars scored");
  now_ms_ = in.Signed("cars clock");
  last_control_ms_ = in.Signed("cars control clock");
  for (uint64_t* n : {&counters_.decisions, &counters_.rule_admits, &counters_.rule_refusals,
                      &counters_.exploration_admits, &counters_.labels, &counters_.positive_labels,
                      &counters_.batches}) {
    *n = in.Varint("cars counters");
  }
  return in.status();
}

}  // namespace kvlearn
