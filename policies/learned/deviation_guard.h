// Whether the learned policy's eviction choices beat recency on the traffic
// it is serving now: online regret of two experts, the model and recency
// (LeCaR / CACHEUS), priced in cost.
//
// At every eviction both experts choose: the model m, recency k. When they
// differ, the one whose choice was actually evicted is answerable for it:
// if the evicted block comes back while the other expert would still have
// held it, that expert's choice would have hit, and the evicting expert
// owes the hit's saving (the block's R - T). How long the other would have
// held it is the time the deviation swaps one slot for: recency would keep
// m for E - idle(m) more (E, the pool's eviction age, is how long recency
// keeps an unused block), and the model keeps k in m's place for that same
// time. A block that comes back later, or not at all, settles nothing.
// Unlike the pairwise test this replaces (docs/learned_policy.md), regret
// accrues to whichever expert is evicting, so a distrusted model is judged
// by recency's mistakes it would have avoided without evicting anything.
//
// The model is trusted while recency's decayed regret is at least the
// model's (each settlement decays both by 0.99, a half-life of about 70).
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

class LearnedDeviationGuard {
 public:
  // Open verdicts held before expired ones are swept out (memory only).
  static constexpr size_t kSweepAt = 8192;

  // True while the model has cost no more than recency.
  bool Trusted() const { return recency_regret_ >= model_regret_; }

  // An eviction of `victim` at `now_ms`, where the model would have evicted
  // `model_choice` and recency `recency_choice`; a hit on the victim saves
  // `victim_saving`; `swap_ms` is E - idle(model_choice).
  void OnEviction(BlockIndex model_choice, BlockIndex recency_choice, BlockIndex victim,
                  double victim_saving, int64_t now_ms, int64_t swap_ms) {
    if (model_choice == kNoBlock || recency_choice == kNoBlock) return;
    if (model_choice == recency_choice || swap_ms <= 0) return;
    if (victim != model_choice && victim != recency_choice) return;
    if (open_.size() >= sweep_at_) {
      absl::erase_if(open_, [now_ms](const auto& e) { return e.second.until_ms < now_ms; });
      sweep_at_ = std::max(kSweepAt, 2 * open_.size());
    }
    open_[victim] = {now_ms + swap_ms, victim_saving, victim == model_choice};
  }

  // A request used `chain` at `now_ms`: settle the verdicts its blocks close.
  void OnAccess(std::span<const BlockIndex> chain, int64_t now_ms) {
    if (open_.empty()) return;
    for (const BlockIndex b : chain) {
      const auto it = open_.find(b);
      if (it == open_.end()) continue;
      const Verdict& v = it->second;
      if (now_ms <= v.until_ms) {
        model_regret_ = kDecay * model_regret_ + (v.by_model ? v.saving : 0);
        recency_regret_ = kDecay * recency_regret_ + (v.by_model ? 0 : v.saving);
      }
      open_.erase(it);
    }
  }

  double model_regret() const { return model_regret_; }
  double recency_regret() const { return recency_regret_; }

  // The regrets, the sweep point and the open verdicts, sorted by block so
  // the bytes do not depend on the map's order, for snapshots
  // (core/policy_state.h). A verdict on a block a compaction forgets is
  // dropped: that block cannot come back as itself.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    out.Double(model_regret_);
    out.Double(recency_regret_);
    out.Varint(sweep_at_);
    std::vector<std::pair<BlockIndex, Verdict>> kept;
    for (const auto& [b, v] : open_) {
      const BlockIndex to = Renumbered(renumber, b);
      if (to != kNoBlock) kept.emplace_back(to, v);
    }
    std::sort(kept.begin(), kept.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    out.Varint(kept.size());
    for (const auto& [b, v] : kept) {
      out.Varint(b);
      out.Signed(v.until_ms);
      out.Double(v.saving);
      out.Bool(v.by_model);
    }
  }
  // REQUIRES: a guard that saw nothing yet.
  void Load(PolicyStateReader& in) {
    model_regret_ = in.Double("guard model regret");
    recency_regret_ = in.Double("guard recency regret");
    // Any value is safe: open_ holds at most one verdict per block.
    sweep_at_ = std::max<uint64_t>(kSweepAt, in.Varint("guard sweep point"));
    const uint64_t n = in.Count("guard open verdicts", 4);
    for (uint64_t k = 0; k < n && in.ok(); ++k) {
      const BlockIndex b = in.Block("guard verdict block");
      Verdict v;
      v.until_ms = in.Signed("guard verdict end");
      v.saving = in.Double("guard verdict saving");
      v.by_model = in.Bool("guard verdict expert");
      if (!in.ok()) break;
      if (!open_.emplace(b, v).second) {
        in.Fail("guard open verdicts: a block twice");
        break;
      }
    }
  }

 private:
  static constexpr double kDecay = 0.99;
  // An evicted block the other expert would have held until `until_ms`.
  struct Verdict {
    int64_t until_ms = 0;
    double saving = 0;      // what a hit on it saves
    bool by_model = false;  // the model evicted it (else recency did)
  };

  absl::flat_hash_map<BlockIndex, Verdict> open_;
  size_t sweep_at_ = kSweepAt;
  double model_regret_ = 0, recency_regret_ = 0;
};

}  // namespace kvlearn
