// LRU under the prefix constraint.
//
// An intrusive doubly-linked list ordered from most to least recently used.
// Hits are reported deepest first and each moves to the front, so a chain ends
// up root-first; a new block is linked right behind its parent (same request,
// same recency, deeper goes first). Hence every block sits behind all of its
// ancestors and the list tail is always a leaf: eviction is O(1) except when
// the tail is the current request's pinned block.
#include <algorithm>
#include <vector>

#include "policies/policy_env.h"
#include "policies/recency_list.h"
#include "policies/retention_policy.h"

namespace kvlearn {
namespace {

class LruPolicy final : public RetentionPolicy {
 public:
  explicit LruPolicy(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {}

  std::string_view name() const override { return "lru"; }

  void OnHit(BlockIndex b, const AccessInfo&) override {
    list_.MoveToFront(b);
    stamp_[b] = ++clock_;
  }

  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    const BlockIndex parent = catalog_[b].parent;
    list_.InsertBehindParent(parent, b);
    stamp_[b] = parent == kNoBlock ? ++clock_ : stamp_[parent];
  }

  BlockIndex SelectVictim() override {
    for (BlockIndex b = list_.Back(); b != kNoBlock; b = list_.Prev(b)) {
      if (pool_.IsEvictable(b)) return b;
    }
    return kNoBlock;
  }

  void OnEvict(BlockIndex b) override { list_.Remove(b); }

  // Older = evicted sooner; a descendant shares its ancestor's stamp at insert,
  // so ties between them rank by depth.
  double EvictionPriority(BlockIndex b) const override {
    return static_cast<double>(stamp_[b]) - catalog_[b].depth * 1e-6;
  }

  // The list from most to least recent, each block with its stamp.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    out.Varint(clock_);
    out.Varint(pool_.resident_blocks());
    for (BlockIndex b = list_.Front(); b != kNoBlock; b = list_.Next(b)) {
      out.Varint(Renumbered(renumber, b));
      out.Varint(stamp_[b]);
    }
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    clock_ = in.Varint("lru clock");
    const uint64_t n = ReadResidentCount(in, pool_, "lru list", 2);
    std::vector<uint8_t> seen(in.blocks(), 0);
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      const BlockIndex b = ReadResident(in, pool_, seen, "lru list");
      const uint64_t stamp = in.Varint("lru stamp");
      if (!in.ok()) break;
      Grow(b);
      list_.PushBack(b);
      stamp_[b] = stamp;
    }
    return in.status();
  }

 private:
  void Grow(BlockIndex b) {
    list_.Grow(b);
    if (b >= stamp_.size()) stamp_.resize(std::max<size_t>(b + 1, stamp_.size() * 2), 0);
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  RecencyList list_;
  std::vector<uint64_t> stamp_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeLruPolicy(const PolicyEnv& env) {
  return std::make_unique<LruPolicy>(env);
}

}  // namespace kvlearn
