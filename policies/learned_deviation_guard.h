// Whether the learned policy's eviction choices beat recency on the traffic
// it is serving now, judged online the way Belady would judge them.
//
// Each time the model evicts a block v where recency would have evicted k
// (a "deviation"), the guard remembers the pair. The first of the two to be
// used again settles it: k first, while still resident, means keeping k was
// right (v's next use is the later one, Belady's own criterion); v first
// means recency was. If k is evicted before either returns, keeping it
// bought no hit, and only v's return (a loss) can still settle the pair.
// Pairs whose blocks never come back settle nothing. The model is trusted
// while its settled deviations are right at least as often as wrong (counts
// decay with a half-life of about 70 settlements); while it is not, the
// policy evicts by recency and lets the model choose once in kProbeEvery
// evictions, so the evidence keeps coming and a change of traffic can win
// the trust back (the LeCaR / CACHEUS idea of weighting two experts by
// regret).
//
// Deterministic; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

class LearnedDeviationGuard {
 public:
  static constexpr size_t kPending = 4096;  // deviations remembered at once
  static constexpr uint64_t kProbeEvery = 16;

  // True when the model's record is right at least as often as wrong.
  bool Trusted() const { return right_ >= wrong_; }
  // True when the model chooses the next victim: trusted, or probing.
  bool ModelChooses() const { return Trusted() || evictions_ % kProbeEvery == 0; }

  // An eviction happened; `recency_choice` is what recency would have evicted.
  void OnEvict(BlockIndex victim, BlockIndex recency_choice) {
    ++evictions_;
    // The kept block of an open pair leaves after all: keeping it bought no
    // hit, so only the evicted one's return (a loss) can settle that pair.
    if (const auto it = open_.find(victim); it != open_.end()) {
      if (pending_[it->second].kept == victim) {
        pending_[it->second].kept = kNoBlock;
        open_.erase(it);
      }
    }
    if (recency_choice == kNoBlock || recency_choice == victim) return;
    // A block in an open pair already: that pair stays unsettled.
    for (const BlockIndex b : {victim, recency_choice}) {
      if (const auto it = open_.find(b); it != open_.end()) Forget(pending_[it->second]);
    }
    Pair& slot = pending_[next_ % kPending];
    Forget(slot);
    slot = {victim, recency_choice, true};
    open_[victim] = next_ % kPending;
    open_[recency_choice] = next_ % kPending;
    ++next_;
  }

  // A request used `chain`: settle the deviations its blocks close.
  void OnAccess(std::span<const BlockIndex> chain) {
    if (open_.empty()) return;
    for (const BlockIndex b : chain) {
      const auto it = open_.find(b);
      if (it == open_.end()) continue;
      Pair& p = pending_[it->second];
      const bool right = b == p.kept;
      right_ = kDecay * right_ + (right ? 1 : 0);
      wrong_ = kDecay * wrong_ + (right ? 0 : 1);
      Forget(p);
    }
  }

  // The record, the counters and the open pairs with their slots, for
  // snapshots (core/policy_state.h). A pair with a block a compaction
  // forgets is closed unsettled, as if it had been overwritten.
  void Save(std::span<const BlockIndex> renumber, PolicyStateWriter& out) const {
    out.Double(right_);
    out.Double(wrong_);
    out.Varint(next_);
    out.Varint(evictions_);
    std::vector<uint32_t> slots;
    for (uint32_t i = 0; i < kPending; ++i) {
      const Pair& p = pending_[i];
      if (p.open && Renumbered(renumber, p.victim) != kNoBlock &&
          (p.kept == kNoBlock || Renumbered(renumber, p.kept) != kNoBlock)) {
        slots.push_back(i);
      }
    }
    out.Varint(slots.size());
    for (uint32_t i : slots) {
      out.Varint(i);
      out.Varint(OptionalBlock(renumber, pending_[i].victim));
      out.Varint(OptionalBlock(renumber, pending_[i].kept));
    }
  }
  // REQUIRES: a guard that saw nothing yet.
  void Load(PolicyStateReader& in) {
    right_ = in.Double("guard record");
    wrong_ = in.Double("guard record");
    next_ = in.Varint("guard pairs");
    evictions_ = in.Varint("guard evictions");
    const uint64_t n = in.Count("guard open pairs", 3);
    for (uint64_t k = 0; k < n && in.ok(); ++k) {
      const auto slot = static_cast<uint32_t>(in.Bounded("guard slot", kPending - 1));
      const BlockIndex victim = OptionalBlock(in, "guard victim");
      const BlockIndex kept = OptionalBlock(in, "guard kept block");
      if (!in.ok()) break;
      if (pending_[slot].open || victim == kNoBlock || victim == kept || open_.contains(victim) ||
          (kept != kNoBlock && open_.contains(kept))) {
        in.Fail("guard open pairs: a slot or block twice, or no victim");
        break;
      }
      Pair& p = pending_[slot];
      p = {victim, kept, true};
      open_[p.victim] = slot;
      if (p.kept != kNoBlock) open_[p.kept] = slot;
    }
  }

  double right() const { return right_; }
  double wrong() const { return wrong_; }

 private:
  static constexpr double kDecay = 0.99;
  struct Pair {
    BlockIndex victim = kNoBlock, kept = kNoBlock;
    bool open = false;
  };

  void Forget(Pair& p) {
    if (!p.open) return;
    open_.erase(p.victim);
    open_.erase(p.kept);
    p.open = false;
  }

  std::vector<Pair> pending_ = std::vector<Pair>(kPending);
  absl::flat_hash_map<BlockIndex, uint32_t> open_;  // block -> slot of its open pair
  uint64_t next_ = 0;
  uint64_t evictions_ = 0;
  double right_ = 0, wrong_ = 0;
};

}  // namespace kvlearn
