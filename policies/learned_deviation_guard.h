// Whether the learned policy's eviction choices beat recency on the traffic
// it is serving now, judged online the way Belady would judge them.
//
// Each time the model evicts a block v where recency would have evicted k
// (a "deviation"), the guard remembers the pair. The first of the two to be
// used again settles it: k first means keeping k was right (v's next use is
// the later one, Belady's own criterion), v first means recency was. Pairs
// whose blocks never come back settle nothing. The model is trusted while
// its settled deviations are right at least as often as wrong (counts decay
// with a half-life of about 70 settlements); while it is not, the policy
// evicts by recency, and only deviations still open can win the trust back.
// (LeCaR / CACHEUS weight two experts by regret and keep sampling the weaker
// one; here, probing 1 eviction in 16 while distrusted cost 2% on a tuning
// trace whose deviations the pairwise test judged right: see
// docs/learned_policy.md.)
//
// Deterministic; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"

namespace kvlearn {

class LearnedDeviationGuard {
 public:
  static constexpr size_t kPending = 4096;  // deviations remembered at once

  // True when the model's choice should be used for the next eviction.
  bool Trusted() const { return right_ >= wrong_; }

  // An eviction happened; `recency_choice` is what recency would have evicted.
  void OnEvict(BlockIndex victim, BlockIndex recency_choice) {
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
  double right_ = 0, wrong_ = 0;
};

}  // namespace kvlearn
