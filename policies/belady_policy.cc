// Belady's MIN with bypass, the offline oracle: it reads the trace's future
// (PolicyEnv::next_use) and evicts the resident leaf whose next use is
// furthest away, never-used-again first; ties go to the deeper block. It
// admits a new block only if the block is used again and either fits in the
// free room or is used strictly sooner than every block that would have to
// leave to make room for it (with equal-sized blocks that is the one block
// SelectVictim() would pick; partial last blocks are smaller, so a full block
// may displace two).
//
// Prefix constraint: it costs the oracle nothing. Every request that uses a
// block also uses its ancestors, so an ancestor's next use is never later
// than a descendant's: the furthest next use among unpinned resident blocks
// is always attained by a leaf, and ranking leaves only (LeafOrderedPolicy,
// key = -next_use) picks what unconstrained MIN would. For the same reason a
// refused block's descendants would be refused too, so the simulator's "the
// first refused block ends admission" loses nothing.
//
// Each block's key is the next use seen at its latest access, which stays
// exact: a resident block is always hit (and re-keyed) by the request that
// uses it, because residency is prefix-closed.
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "policies/leaf_ordered_policy.h"
#include "policies/policy_env.h"

namespace kvlearn {
namespace {

class BeladyPolicy final : public LeafOrderedPolicy {
 public:
  explicit BeladyPolicy(const PolicyEnv& env) : LeafOrderedPolicy(env), next_use_(*env.next_use) {}

  std::string_view name() const override { return "belady"; }

  void OnHit(BlockIndex b, const AccessInfo& access) override { Rekey(b, KeyAt(b, access)); }

  bool ShouldAdmit(BlockIndex b, const AccessInfo& access) override {
    if (next_use_[access.access_pos] == kNeverUsedAgain) return false;
    const uint64_t bytes = catalog_[b].bytes;
    if (pool_.free_bytes() >= bytes) return true;
    return DisplacesOnlyLaterBlocks(KeyAt(b, access).primary, bytes - pool_.free_bytes());
  }

  void OnInsert(BlockIndex b, const AccessInfo& access) override { Track(b, KeyAt(b, access)); }

 private:
  // Furthest next use = smallest key; kNeverUsedAgain is the furthest of all.
  // Ties (blocks never used again, blocks of one chain used next by the same
  // request) go by block index, so the order is total and RankVictims can
  // tell it; any of several equally-far blocks is an optimal victim (the
  // sample trace's table is unchanged by this tie-break).
  OrderKey KeyAt(BlockIndex b, const AccessInfo& access) const {
    return {-static_cast<double>(next_use_[access.access_pos]), static_cast<double>(b),
            catalog_[b].depth};
  }

  // Walks the blocks SelectVictim() would return, in order, until `need`
  // bytes are free, without evicting anything: the leaf heap's entries in key
  // order (a best-first walk over heap slots), skipping the pinned leaf, plus each parent as
  // soon as all its resident children are among the victims. True if all of
  // them are used later than a block keyed `incoming`.
  bool DisplacesOnlyLaterBlocks(double incoming, uint64_t need) const {
    constexpr uint32_t kNotInHeap = UINT32_MAX;
    struct Candidate {
      OrderKey key;
      BlockIndex block;
      uint32_t slot;  // heap slot, or kNotInHeap for a parent that became a leaf
    };
    const auto later = [](const Candidate& a, const Candidate& b) {
      return EvictsBefore(b.key, a.key);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> order(later);
    const LeafHeap& leaves = heap();
    if (!leaves.empty()) order.push({leaves.KeyOf(leaves.At(0)), leaves.At(0), 0});
    absl::flat_hash_map<BlockIndex, uint32_t> children_gone;
    uint64_t freed = 0;
    while (!order.empty()) {
      const Candidate c = order.top();
      order.pop();
      if (c.slot != kNotInHeap) {
        const size_t first = size_t{c.slot} * LeafHeap::kArity + 1;
        for (size_t s = first; s < first + LeafHeap::kArity && s < leaves.size(); ++s) {
          const BlockIndex child = leaves.At(s);
          order.push({leaves.KeyOf(child), child, static_cast<uint32_t>(s)});
        }
      }
      // The only pinned leaf is the current request's deepest block; its
      // ancestors are pinned too and never become candidates.
      if (pool_.IsPinned(c.block)) continue;
      if (!(c.key.primary < incoming)) return false;  // used no later than the newcomer
      freed += catalog_[c.block].bytes;
      if (freed >= need) return true;
      const BlockIndex parent = catalog_[c.block].parent;
      if (parent != kNoBlock && ++children_gone[parent] == pool_.ResidentChildren(parent)) {
        order.push({KeyOf(parent), parent, kNotInHeap});
      }
    }
    return false;  // not enough evictable bytes
  }

  const std::vector<uint32_t>& next_use_;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeBeladyPolicy(const PolicyEnv& env) {
  return std::make_unique<BeladyPolicy>(env);
}

}  // namespace kvlearn
