// LRU under the prefix constraint: the least recently used leaf goes.
//
// An intrusive doubly-linked list ordered from most to least recently used,
// each block with the clock value of its last use (its stamp). A hit moves the
// block to the front. New blocks are as recent as the request that brings
// them. When they extend the request's deepest hit, they go right behind it,
// sharing its stamp (hits come deepest first, so a chain ends up root-first,
// the new blocks deepest last); a run that extends anything else (a block
// the request did not use: a cluster's pool is not told of the blocks a node
// served itself) goes to the front with a new stamp. The list is thus
// ordered by stamp, ties deeper first.
//
// Only leaves may go, and where the request did not use a new block's parent
// an interior block can reach the back of the list. Rather than step over it
// at every eviction, the victim scan unlinks each block it passes: an
// interior one is set aside, a pinned leaf becomes a *returned* leaf, as does
// a set-aside block whose last child goes. Unlinked blocks are older than
// every linked one (the scan takes them from the back; linking happens only
// at the front or behind a linked block), so the returned leaves, least
// recent first, come before the list, and the victims are exactly those of
// scanning the whole list every time (tests/policies/lru_set_aside_test.cc).
#include <algorithm>
#include <cstdint>
#include <queue>
#include <vector>

#include "policies/policy_env.h"
#include "policies/recency_list.h"
#include "policies/retention_policy.h"

namespace kvlearn {
namespace {

class LruPolicy final : public RetentionPolicy {
 public:
  explicit LruPolicy(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {
    // Sized for the catalog at once (a replay's is complete), so a replay's
    // timed loop does not fault in these pages; the sidecar's grows later.
    if (catalog_.size() > 0) Grow(static_cast<BlockIndex>(catalog_.size() - 1));
  }

  std::string_view name() const override { return "lru"; }

  void OnHit(BlockIndex b, const AccessInfo&) override {
    if (where_[b] == kLinked) {
      list_.MoveToFront(b);
    } else {
      list_.PushFront(b);
      where_[b] = kLinked;
    }
    stamp_[b] = ++clock_;
    if (first_hit_pending_) tail_ = b;
    first_hit_pending_ = false;
  }

  void OnRequest(std::span<const BlockIndex>, const AccessInfo&) override {
    tail_ = kNoBlock;
    first_hit_pending_ = true;
  }

  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    const BlockIndex parent = catalog_[b].parent;
    if (parent != kNoBlock && parent == tail_) {
      stamp_[b] = stamp_[parent];
      if (where_[parent] == kLinked) {
        list_.InsertBehindParent(parent, b);
        where_[b] = kLinked;
      } else {
        Return(b);  // behind a set-aside parent: older than the list, as it is
      }
    } else {
      list_.PushFront(b);
      stamp_[b] = ++clock_;
      where_[b] = kLinked;
    }
    tail_ = b;
    first_hit_pending_ = false;
    // A returned leaf that gains a child is interior again: back aside.
    if (parent != kNoBlock && where_[parent] == kReturned) where_[parent] = kAside;
  }

  BlockIndex SelectVictim() override {
    if (const BlockIndex b = LeastRecentReturned(); b != kNoBlock) return b;
    for (BlockIndex b = list_.Back(); b != kNoBlock;) {
      if (pool_.IsEvictable(b)) return b;
      const BlockIndex prev = list_.Prev(b);
      list_.Remove(b);
      if (pool_.IsLeaf(b)) {
        Return(b);  // pinned: it waits among the returned leaves
      } else {
        where_[b] = kAside;
      }
      b = prev;
    }
    return kNoBlock;
  }

  void OnEvict(BlockIndex b) override {
    if (where_[b] == kLinked) list_.Remove(b);
    where_[b] = kGone;
    if (b == tail_) tail_ = kNoBlock;
    const BlockIndex parent = catalog_[b].parent;
    if (parent != kNoBlock && where_[parent] == kAside && pool_.IsLeaf(parent)) Return(parent);
  }

  // Older = evicted sooner; new blocks share the stamp of the block they
  // were linked behind, so ties rank by depth.
  double EvictionPriority(BlockIndex b) const override {
    return static_cast<double>(stamp_[b]) - catalog_[b].depth * 1e-6;
  }

  // Every resident block from most to least recent, each with its stamp (the
  // list, then the blocks set aside, all older than the list), then the
  // block a new one may be linked behind.
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    out.Varint(clock_);
    out.Varint(pool_.resident_blocks());
    for (BlockIndex b = list_.Front(); b != kNoBlock; b = list_.Next(b)) {
      out.Varint(Renumbered(renumber, b));
      out.Varint(stamp_[b]);
    }
    std::vector<BlockIndex> aside;
    for (BlockIndex b = 0; b < where_.size(); ++b) {
      if (where_[b] == kAside || where_[b] == kReturned) aside.push_back(b);
    }
    std::sort(aside.begin(), aside.end(),
              [this](BlockIndex a, BlockIndex b) { return Now(b).EvictsBefore(Now(a)); });
    for (const BlockIndex b : aside) {
      out.Varint(Renumbered(renumber, b));
      out.Varint(stamp_[b]);
    }
    out.Varint(tail_ == kNoBlock ? 0 : uint64_t{Renumbered(renumber, tail_)} + 1);
    out.Bool(first_hit_pending_);
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
      where_[b] = kLinked;
    }
    const uint64_t tail = in.Bounded("lru run tail", in.blocks());
    if (in.ok() && tail > 0 && !pool_.IsResident(static_cast<BlockIndex>(tail - 1))) {
      in.Fail("lru run tail: not a resident block");
    }
    tail_ = tail == 0 ? kNoBlock : static_cast<BlockIndex>(tail - 1);
    first_hit_pending_ = in.Bool("lru first hit pending");
    return in.status();
  }

 private:
  enum Where : uint8_t {
    kGone,      // not resident
    kLinked,    // in the list
    kAside,     // interior, unlinked by the victim scan
    kReturned,  // an unlinked leaf (set aside and then its children went, or
                // pinned when the scan passed it): in returned_
  };

  // A returned leaf as it was when it joined (its stamp may change later,
  // which makes the entry stale).
  struct Returned {
    uint64_t stamp;
    uint32_t depth;
    BlockIndex block;
    // The order SelectVictim takes blocks in: least recent first, ties
    // deeper first.
    bool EvictsBefore(const Returned& o) const {
      return stamp != o.stamp ? stamp < o.stamp : depth > o.depth;
    }
    // For the max-heap, whose top is the first to evict.
    bool operator<(const Returned& o) const { return o.EvictsBefore(*this); }
  };

  Returned Now(BlockIndex b) const { return {stamp_[b], catalog_[b].depth, b}; }

  // An unlinked leaf joins the returned ones.
  void Return(BlockIndex b) {
    where_[b] = kReturned;
    returned_.push(Now(b));
    // Entries go stale when their block is used or evicted; rebuild before
    // they outnumber the pool's blocks.
    if (returned_.size() > 2 * pool_.resident_blocks() + 64) DropStaleReturned();
  }

  bool Current(const Returned& r) const {
    return where_[r.block] == kReturned && stamp_[r.block] == r.stamp;
  }

  // The least recent unpinned returned leaf, or kNoBlock; drops stale entries.
  BlockIndex LeastRecentReturned() {
    BlockIndex found = kNoBlock;
    pinned_.clear();
    while (!returned_.empty()) {
      const Returned top = returned_.top();
      if (!Current(top)) {
        returned_.pop();
        continue;
      }
      if (!pool_.IsPinned(top.block)) {
        found = top.block;
        break;
      }
      pinned_.push_back(top);
      returned_.pop();
    }
    for (const Returned& r : pinned_) returned_.push(r);
    return found;
  }

  void DropStaleReturned() {
    std::vector<Returned> live;
    while (!returned_.empty()) {
      if (Current(returned_.top())) live.push_back(returned_.top());
      returned_.pop();
    }
    returned_ = std::priority_queue<Returned>(std::less<Returned>(), std::move(live));
  }

  void Grow(BlockIndex b) {
    list_.Grow(b, catalog_);
    if (b >= stamp_.size()) {
      const size_t n = GrownPerBlockSize(b + 1, stamp_.size(), catalog_);
      stamp_.resize(n, 0);
      where_.resize(n, kGone);
    }
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  RecencyList list_;
  std::vector<uint64_t> stamp_;
  std::vector<Where> where_;
  std::priority_queue<Returned> returned_;
  std::vector<Returned> pinned_;  // scratch for LeastRecentReturned
  uint64_t clock_ = 0;
  // The block a new one may be linked behind: the request's first (deepest)
  // hit, then the block inserted last. One run per stamp, so blocks sharing
  // a stamp lie on one chain and (stamp, depth) orders them as the list does.
  BlockIndex tail_ = kNoBlock;
  bool first_hit_pending_ = true;
};

}  // namespace

std::unique_ptr<RetentionPolicy> MakeLruPolicy(const PolicyEnv& env) {
  return std::make_unique<LruPolicy>(env);
}

}  // namespace kvlearn
