// LRU under the prefix constraint.
//
// An intrusive doubly-linked list ordered from most to least recently used.
// Hits are reported deepest first and each moves to the front, so a chain ends
// up root-first; a new block is linked right behind its parent (same request,
// same recency, deeper goes first). Hence every block sits behind all of its
// ancestors and the list tail is always a leaf: eviction is O(1) except when
// the tail is the current request's pinned block.
#include <vector>

#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {
namespace {

class LruPolicy final : public RetentionPolicy {
 public:
  explicit LruPolicy(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {}

  std::string_view name() const override { return "lru"; }

  void OnHit(BlockIndex b, const AccessInfo&) override {
    Unlink(b);
    LinkAfter(kHead, b);
    stamp_[b] = ++clock_;
  }

  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    const BlockIndex parent = catalog_[b].parent;
    LinkAfter(parent == kNoBlock ? kHead : Slot(parent), b);
    stamp_[b] = parent == kNoBlock ? ++clock_ : stamp_[parent];
  }

  BlockIndex SelectVictim() override {
    for (uint32_t s = prev_[kHead]; s != kHead; s = prev_[s]) {
      const BlockIndex b = s - 1;
      if (pool_.IsEvictable(b)) return b;
    }
    return kNoBlock;
  }

  void OnEvict(BlockIndex b) override { Unlink(b); }

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
    for (uint32_t s = next_[kHead]; s != kHead; s = next_[s]) {
      out.Varint(Renumbered(renumber, s - 1));
      out.Varint(stamp_[s - 1]);
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
      LinkAfter(prev_[kHead], b);
      stamp_[b] = stamp;
    }
    return in.status();
  }

 private:
  // Slot 0 is the list head sentinel; block b lives in slot b + 1.
  static constexpr uint32_t kHead = 0;
  static uint32_t Slot(BlockIndex b) { return b + 1; }

  void Grow(BlockIndex b) {
    if (Slot(b) < next_.size()) return;
    const size_t n = std::max<size_t>(Slot(b) + 1, next_.size() * 2);
    next_.resize(n, kHead);
    prev_.resize(n, kHead);
    stamp_.resize(n - 1, 0);
  }

  void LinkAfter(uint32_t at, BlockIndex b) {
    const uint32_t s = Slot(b);
    const uint32_t after = next_[at];
    prev_[s] = at;
    next_[s] = after;
    next_[at] = s;
    prev_[after] = s;
  }

  void Unlink(BlockIndex b) {
    const uint32_t s = Slot(b);
    next_[prev_[s]] = next_[s];
    prev_[next_[s]] = prev_[s];
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  std::vector<uint32_t> next_{kHead};
  std::vector<uint32_t> prev_{kHead};
  std::vector<uint64_t> stamp_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeLruPolicy(const PolicyEnv& env) {
  return std::make_unique<LruPolicy>(env);
}

}  // namespace kvlearn
