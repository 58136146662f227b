// ARC: the algorithm and its prefix-constraint adaptation are described in
// arc_policy.h.
#include "policies/arc_policy.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::Status ArcPolicy::SaveState(std::span<const BlockIndex> renumber,
                                  PolicyStateWriter& out) const {
  out.Double(target_t1_);
  out.Bool(returning_from_b2_);
  out.Varint(clock_);
  out.Varint(pool_->resident_blocks());
  for (BlockIndex b = 0; b < renumber.size(); ++b) {
    if (!pool_->IsResident(b)) continue;
    out.Varint(Renumbered(renumber, b));
    out.Varint(where_[b]);
    out.Varint(leaves_.Stamp(b));
  }
  const auto kept = [&renumber](const std::vector<BlockIndex>& list, PolicyStateWriter& out) {
    std::vector<BlockIndex> to;
    for (BlockIndex b : list) {
      if (Renumbered(renumber, b) != kNoBlock) to.push_back(Renumbered(renumber, b));
    }
    out.Varint(to.size());
    for (BlockIndex b : to) out.Varint(b);
  };
  std::vector<BlockIndex> returning[2];
  for (BlockIndex b = 0; b < where_.size(); ++b) {
    if (where_[b] == kReturningFromB1 || where_[b] == kReturningFromB2) {
      returning[where_[b] - kReturningFromB1].push_back(b);
    }
  }
  for (uint8_t ghost : {kB1, kB2}) {
    kept(returning[ghost - kB1], out);
    std::vector<BlockIndex> list;
    for (uint32_t s = next_[GhostSentinel(ghost)]; s >= kFirstBlockSlot; s = next_[s]) {
      list.push_back(s - kFirstBlockSlot);
    }
    kept(list, out);
  }
  for (uint8_t list : {kT1, kT2}) kept(leaves_.list(list).entries(), out);
  return absl::OkStatus();
}

absl::Status ArcPolicy::LoadState(PolicyStateReader& in) {
  target_t1_ = in.Double("arc target");
  returning_from_b2_ = in.Bool("arc returning flag");
  clock_ = in.Varint("arc clock");
  const uint64_t n = ReadResidentCount(in, *pool_, "arc residents", 3);
  std::vector<uint8_t> seen(in.blocks(), 0);
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const BlockIndex b = ReadResident(in, *pool_, seen, "arc residents");
    const auto list = static_cast<uint8_t>(in.Bounded("arc list", kT2));
    const uint64_t stamp = in.Varint("arc stamp");
    if (!in.ok()) break;
    Grow(b);
    where_[b] = list;
    leaves_.SetStamp(b, stamp);
    bytes_[list] += catalog_[b].bytes;
  }
  // Ghosts and returning blocks: out of the pool, in no other list.
  const auto read_absent = [this, &in](std::string_view what, auto&& take) {
    const uint64_t count = in.Count(what);
    for (uint64_t i = 0; i < count && in.ok(); ++i) {
      const BlockIndex b = in.Block(what);
      if (!in.ok()) break;
      Grow(b);
      if (pool_->IsResident(b) || where_[b] != kNowhere) {
        in.Fail(absl::StrCat(std::string(what), ": resident or repeated"));
        break;
      }
      take(b);
    }
  };
  for (uint8_t ghost : {kB1, kB2}) {
    const uint8_t returning = ghost == kB1 ? kReturningFromB1 : kReturningFromB2;
    read_absent("arc returning block", [&](BlockIndex b) { where_[b] = returning; });
    read_absent("arc ghost", [&](BlockIndex b) { PushGhost(ghost, b); });
  }
  uint64_t leaves = 0;
  for (uint8_t list : {kT1, kT2}) {
    const uint64_t count = in.Count("arc leaf heap");
    std::vector<BlockIndex> entries;
    std::fill(seen.begin(), seen.end(), 0);
    for (uint64_t i = 0; i < count && in.ok(); ++i) {
      const BlockIndex b = ReadResident(in, *pool_, seen, "arc leaf heap");
      if (in.ok() && (!pool_->IsLeaf(b) || where_[b] != list)) {
        in.Fail("arc leaf heap: an interior block or one of the other list");
      }
      entries.push_back(b);
    }
    leaves += count;
    if (in.ok() && !leaves_.Assign(list, entries)) in.Fail("arc leaf heap: not in heap order");
  }
  uint64_t resident_leaves = 0;
  for (BlockIndex b = 0; b < in.blocks(); ++b) resident_leaves += pool_->IsLeaf(b) ? 1 : 0;
  if (in.ok() && leaves != resident_leaves) in.Fail("arc leaf heaps: not every resident leaf");
  return in.status();
}

std::vector<BlockIndex> ArcPolicy::RankVictims(std::span<const BlockIndex> candidates) const {
  const absl::flat_hash_set<BlockIndex> wanted(candidates.begin(), candidates.end());
  // Each list's evictable blocks of the drain, least recent on top.
  using Entry = std::pair<uint64_t, BlockIndex>;  // (stamp, block)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> lists[2];
  for (const BlockIndex b : wanted) {
    if (pool_->IsEvictable(b)) lists[where_[b]].push({leaves_.Stamp(b), b});
  }
  absl::flat_hash_map<BlockIndex, uint32_t> children_left;  // of the parents met
  uint64_t t1 = bytes_[kT1];
  std::vector<BlockIndex> order;
  absl::flat_hash_set<BlockIndex> taken;
  while (!lists[kT1].empty() || !lists[kT2].empty()) {
    uint8_t list = ReplaceFromT1(t1) ? kT1 : kT2;
    if (lists[list].empty()) list = list == kT1 ? kT2 : kT1;
    const BlockIndex victim = lists[list].top().second;
    lists[list].pop();
    if (list == kT1) t1 -= std::min(t1, catalog_[victim].bytes);
    if (wanted.contains(victim) && taken.insert(victim).second) order.push_back(victim);
    const BlockIndex parent = catalog_[victim].parent;
    if (parent == kNoBlock || pool_->IsPinned(parent)) continue;
    const auto it = children_left.try_emplace(parent, pool_->ResidentChildren(parent)).first;
    if (--it->second == 0) lists[where_[parent]].push({leaves_.Stamp(parent), parent});
  }
  for (const BlockIndex b : candidates) {
    if (taken.insert(b).second) order.push_back(b);
  }
  return order;
}

std::unique_ptr<RetentionPolicy> MakeArcPolicy(const PolicyEnv& env) {
  return std::make_unique<ArcPolicy>(env);
}

}  // namespace kvlearn
