// SIEVE (Zhang et al., "SIEVE is Simpler than LRU: an Efficient Turn-Key
// Eviction Algorithm for Web Caches", NSDI '24) under the prefix constraint.
//
// The algorithm as published: one FIFO queue of objects, each with a
// "visited" bit. A new object enters at the head with the bit clear; a hit
// sets the bit and moves nothing. A "hand" walks from the tail toward the
// head: it clears the bit of every visited object it passes and evicts the
// first object whose bit is clear, then rests on the evicted object's
// head-side neighbour; past the head it wraps to the tail.
//
// Adaptation to leaf-only eviction:
//  - The hand passes over a block that may not leave now (it still has
//    resident children, or the current request pinned it) exactly as over a
//    visited block: it clears the bit and moves on. The bit keeps SIEVE's
//    meaning for every block, "used since the hand last passed"; an interior
//    block needs no extra protection, the prefix constraint already keeps it
//    until its subtree is gone, and when it becomes a leaf it survives the
//    next pass only if it was used since the last one. (Leaving the bit of a
//    skipped block untouched would instead credit an old hit a second time.)
//  - Order within one request's new blocks: SIEVE puts every new object at
//    the head; the blocks a request inserts arrive root first in the same
//    instant, so their order among themselves is ours to choose. A block
//    whose parent is the block inserted just before it is linked right
//    behind (tail-side of) that parent, so a freshly admitted chain sits
//    deepest-first on the hand's path: the hand meets its leaf first and,
//    once the leaf is gone, its parent right after. Any other new block goes
//    to the head. Such a run of blocks is a "group": its members are
//    contiguous and one path of the prefix tree, so queue order is exactly
//    (group ascending, depth descending) from tail to head. Blocks never move
//    afterwards, as in SIEVE.
//  - SelectVictim scans at most two laps: the first clears every bit it
//    passes, so if it met any evictable block, the second finds one
//    (evictability does not change during a scan); if it met none it
//    returns kNoBlock. The victim stays in the queue with the hand on it
//    until OnEvict unlinks it and moves the hand on, so SelectVictim called
//    twice returns the same block.
//
// Ranking: RankVictims replays SelectVictim/OnEvict on copies of the
// candidates' bits and child counts, treating the candidates as the only
// blocks allowed to leave; given every resident block it returns exactly the
// order in which repeated SelectVictim/OnEvict would drain the pool.
// Candidates that could never leave in that replay (pinned, or with a
// resident descendant outside the list) follow in the hand's order;
// non-resident ones come last. EvictionPriority is a scalar approximation
// that ignores the prefix constraint: distance from the hand in queue order,
// one lap later if the bit is set.
//
// Not thread-safe: one policy object per pool.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "policies/policy_env.h"
#include "policies/retention_policy.h"

namespace kvlearn {
namespace {

class SievePolicy final : public RetentionPolicy {
 public:
  explicit SievePolicy(const PolicyEnv& env) : catalog_(*env.catalog), pool_(*env.pool) {
    // Sized for the catalog at once (a replay's is complete), so a replay's
    // timed loop does not fault in these pages; the sidecar's grows later.
    if (catalog_.size() > 0) Grow(static_cast<BlockIndex>(catalog_.size() - 1));
  }

  std::string_view name() const override { return "sieve"; }

  void OnHit(BlockIndex b, const AccessInfo&) override { visited_[b] = 1; }

  void OnInsert(BlockIndex b, const AccessInfo&) override {
    Grow(b);
    visited_[b] = 0;
    const BlockIndex parent = catalog_[b].parent;
    if (parent != kNoBlock && parent == last_inserted_) {
      LinkBetween(towards_tail_[Slot(parent)], Slot(parent), b);
      group_[b] = group_[parent];
    } else {
      LinkBetween(towards_tail_[kSentinel], kSentinel, b);  // the head
      group_[b] = ++group_clock_;
    }
    last_inserted_ = b;
    ++count_;
  }

  BlockIndex SelectVictim() override {
    if (count_ == 0) return kNoBlock;
    uint32_t s = hand_ != kSentinel ? hand_ : towards_head_[kSentinel];
    bool seen_evictable = false;
    for (uint64_t step = 0; step < 2 * count_; ++step) {
      if (step == count_ && !seen_evictable) break;
      const BlockIndex b = s - kFirstBlockSlot;
      if (pool_.IsEvictable(b)) {
        if (!visited_[b]) {
          hand_ = s;
          return b;
        }
        seen_evictable = true;
      }
      visited_[b] = 0;
      s = StepTowardsHead(s);
    }
    hand_ = s;
    return kNoBlock;
  }

  void OnEvict(BlockIndex b) override {
    const uint32_t s = Slot(b);
    // SIEVE's hand rests on the victim's head-side neighbour; past the head
    // it starts again from the tail (kSentinel stands for "from the tail").
    if (hand_ == s) hand_ = towards_head_[s];
    if (last_inserted_ == b) last_inserted_ = kNoBlock;
    towards_head_[towards_tail_[s]] = towards_head_[s];
    towards_tail_[towards_head_[s]] = towards_tail_[s];
    --count_;
  }

  double EvictionPriority(BlockIndex b) const override {
    // Queue positions as one number, tail first: depth below 2^20 and fewer
    // than 2^33 groups keep it exact in a double.
    const auto position = [this](BlockIndex x) {
      return static_cast<double>(group_[x]) * 0x1p20 - catalog_[x].depth;
    };
    const double lap = static_cast<double>(group_clock_ + 1) * 0x1p20;
    const double start = hand_ == kSentinel ? 0 : position(hand_ - kFirstBlockSlot);
    double distance = position(b) - start;
    if (distance < 0) distance += lap;
    return visited_[b] ? distance + lap : distance;
  }

  std::vector<BlockIndex> RankVictims(std::span<const BlockIndex> candidates) const override;

  // The queue tail to head (block, bit, group), the hand and the last
  // inserted block (0 for none, else block + 1).
  absl::Status SaveState(std::span<const BlockIndex> renumber,
                         PolicyStateWriter& out) const override {
    out.Varint(group_clock_);
    out.Varint(hand_ == kSentinel ? 0 : OptionalBlock(renumber, hand_ - kFirstBlockSlot));
    out.Varint(OptionalBlock(renumber, last_inserted_));
    out.Varint(count_);
    for (uint32_t s = towards_head_[kSentinel]; s != kSentinel; s = towards_head_[s]) {
      const BlockIndex b = s - kFirstBlockSlot;
      out.Varint(Renumbered(renumber, b));
      out.Varint(visited_[b]);
      out.Varint(group_[b]);
    }
    return absl::OkStatus();
  }

  absl::Status LoadState(PolicyStateReader& in) override {
    group_clock_ = in.Varint("sieve group clock");
    const BlockIndex hand = OptionalBlock(in, "sieve hand");
    const BlockIndex last = OptionalBlock(in, "sieve last inserted");
    const uint64_t n = ReadResidentCount(in, pool_, "sieve queue", 3);
    std::vector<uint8_t> seen(in.blocks(), 0);
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      const BlockIndex b = ReadResident(in, pool_, seen, "sieve queue");
      const bool visited = in.Bool("sieve bit");
      const uint64_t group = in.Varint("sieve group");
      if (!in.ok()) break;
      Grow(b);
      LinkBetween(towards_tail_[kSentinel], kSentinel, b);  // the head
      visited_[b] = visited ? 1 : 0;
      group_[b] = group;
      ++count_;
    }
    for (const BlockIndex b : {hand, last}) {
      if (in.ok() && b != kNoBlock && !pool_.IsResident(b)) {
        in.Fail("sieve hand or last inserted block: not resident");
      }
    }
    if (!in.ok()) return in.status();
    hand_ = hand == kNoBlock ? kSentinel : Slot(hand);
    last_inserted_ = last;
    return absl::OkStatus();
  }

 private:
  // Slot 0 is the queue's sentinel, block b lives in slot b + 1. The queue is
  // circular: towards_head_[kSentinel] is the tail (oldest), towards_tail_
  // [kSentinel] the head (newest), and the head's towards_head_ is kSentinel.
  static constexpr uint32_t kSentinel = 0;
  static constexpr uint32_t kFirstBlockSlot = 1;
  static uint32_t Slot(BlockIndex b) { return b + kFirstBlockSlot; }

  uint32_t StepTowardsHead(uint32_t s) const {
    const uint32_t next = towards_head_[s];
    return next == kSentinel ? towards_head_[kSentinel] : next;
  }

  // Links b between `tail_side` and `head_side`, two neighbouring slots.
  void LinkBetween(uint32_t tail_side, uint32_t head_side, BlockIndex b) {
    const uint32_t s = Slot(b);
    towards_head_[tail_side] = s;
    towards_tail_[s] = tail_side;
    towards_head_[s] = head_side;
    towards_tail_[head_side] = s;
  }

  void Grow(BlockIndex b) {
    if (b < visited_.size()) return;
    const size_t n = GrownPerBlockSize(b + 1, visited_.size(), catalog_);
    visited_.resize(n, 0);
    group_.resize(n, 0);
    towards_head_.resize(n + kFirstBlockSlot, kSentinel);
    towards_tail_.resize(n + kFirstBlockSlot, kSentinel);
  }

  const BlockCatalog& catalog_;
  const PoolState& pool_;
  std::vector<uint8_t> visited_;
  std::vector<uint64_t> group_;  // see the header comment
  uint64_t group_clock_ = 0;
  std::vector<uint32_t> towards_head_{kSentinel};
  std::vector<uint32_t> towards_tail_{kSentinel};
  uint32_t hand_ = kSentinel;  // the slot the hand rests on; kSentinel: start at the tail
  BlockIndex last_inserted_ = kNoBlock;
  uint64_t count_ = 0;
};

std::vector<BlockIndex> SievePolicy::RankVictims(std::span<const BlockIndex> candidates) const {
  // Resident candidates in queue order from the tail; the rest go last.
  std::vector<BlockIndex> queue;
  std::vector<BlockIndex> absent;
  for (const BlockIndex b : candidates) (pool_.IsResident(b) ? queue : absent).push_back(b);
  const auto position = [this](BlockIndex b) {
    return std::make_tuple(group_[b], -static_cast<int64_t>(catalog_[b].depth));
  };
  std::sort(queue.begin(), queue.end(),
            [&](BlockIndex a, BlockIndex b) { return position(a) < position(b); });
  queue.erase(std::unique(queue.begin(), queue.end()), queue.end());
  // The hand starts at its own block or the first candidate after it.
  if (hand_ != kSentinel && !queue.empty()) {
    const auto hand_position = position(hand_ - kFirstBlockSlot);
    const auto first = std::partition_point(
        queue.begin(), queue.end(), [&](BlockIndex b) { return position(b) < hand_position; });
    std::rotate(queue.begin(), first, queue.end());
  }

  // Replays the hand over a circular list of the candidates' indices.
  const auto n = static_cast<uint32_t>(queue.size());
  absl::flat_hash_map<BlockIndex, uint32_t> index;
  index.reserve(n);
  std::vector<uint32_t> next(n);
  std::vector<uint32_t> prev(n);
  std::vector<uint8_t> visited(n);
  std::vector<uint32_t> children(n);
  for (uint32_t i = 0; i < n; ++i) {
    index.emplace(queue[i], i);
    next[i] = i + 1 == n ? 0 : i + 1;
    prev[i] = i == 0 ? n - 1 : i - 1;
    visited[i] = visited_[queue[i]];
    children[i] = pool_.ResidentChildren(queue[i]);
  }
  std::vector<BlockIndex> order;
  order.reserve(candidates.size());
  uint32_t left = n;
  uint32_t at = 0;
  uint64_t steps_without_eviction = 0;
  while (left > 0 && steps_without_eviction < 2 * uint64_t{left}) {
    const BlockIndex b = queue[at];
    if (!visited[at] && children[at] == 0 && !pool_.IsPinned(b)) {
      order.push_back(b);
      const BlockIndex parent = catalog_[b].parent;
      if (parent != kNoBlock) {
        if (const auto it = index.find(parent); it != index.end()) --children[it->second];
      }
      next[prev[at]] = next[at];
      prev[next[at]] = prev[at];
      at = next[at];
      --left;
      steps_without_eviction = 0;
      continue;
    }
    visited[at] = 0;
    at = next[at];
    ++steps_without_eviction;
  }
  for (; left > 0; --left, at = next[at]) order.push_back(queue[at]);
  order.insert(order.end(), absent.begin(), absent.end());
  return order;
}

}  // namespace

std::unique_ptr<RetentionPolicy> MakeSievePolicy(const PolicyEnv& env) {
  return std::make_unique<SievePolicy>(env);
}

}  // namespace kvlearn
