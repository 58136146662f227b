// What the learned policy's two shadow pools (learned/shadow_pool.h, which
// evicts by recency, and learned/arc_shadow_pool.h, by ARC) keep alike: the
// resident blocks, each with the bytes it was copied in with, and the latest
// request's chain, whose blocks the real pool holds at the next request are
// copied in then, and whose hits and copies stay pinned until then; and how
// both are saved and loaded.
//
// Bytes are counted as each block was copied in: the sidecar may resize a
// block the real pool no longer holds (BlockCatalog::Resize) while a shadow
// still does, and the catalog's current size would then unbalance the
// count. The PoolState inside tracks residency, children and pins; its own
// byte count is not used.
//
// Deterministic; not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/block_catalog.h"
#include "core/policy_state.h"
#include "core/pool_state.h"

namespace kvlearn {

class ShadowResidents {
 public:
  ShadowResidents(const BlockCatalog* catalog, uint64_t capacity_bytes)
      : catalog_(catalog), pool_(catalog, capacity_bytes), capacity_(capacity_bytes) {}

  const BlockCatalog& catalog() const { return *catalog_; }
  const PoolState& pool() const { return pool_; }
  PoolState& pool() { return pool_; }
  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t used_bytes() const { return used_; }
  uint64_t free_bytes() const { return capacity_ - used_; }
  std::span<const BlockIndex> latest() const { return latest_; }
  void SetLatest(std::span<const BlockIndex> chain) { latest_.assign(chain.begin(), chain.end()); }

  // Follows the catalog's growth.
  void Grow() {
    const size_t n = catalog_->size();
    pool_.Grow(n);
    if (bytes_.size() < n) bytes_.resize(std::max(n, 2 * bytes_.size()), 0);
  }

  // REQUIRES: b's parent resident (or none), b not.
  void Insert(BlockIndex b, uint64_t bytes) {
    pool_.Insert(b);
    bytes_[b] = bytes;
    used_ += bytes;
  }
  // REQUIRES: pool().IsLeaf(b).
  void Evict(BlockIndex b) {
    pool_.Evict(b);
    used_ -= bytes_[b];
  }

  // The kept residents of `order` (every resident exactly once), renumbered,
  // each with its bytes; then the latest request's chain up to its first
  // forgotten block. Returns which residents were kept (KeptThroughCompaction).
  std::vector<uint8_t> Save(std::span<const BlockIndex> renumber, std::span<const BlockIndex> order,
                            PolicyStateWriter& out) const {
    uint64_t kept = 0;
    const std::vector<uint8_t> keep = KeptThroughCompaction(renumber, kept);
    out.Varint(kept);
    for (const BlockIndex b : order) {
      if (!keep[b]) continue;
      out.Varint(Renumbered(renumber, b));
      out.Varint(bytes_[b]);
    }
    SaveKeptChain(renumber, latest_, out);
    return keep;
  }

  // REQUIRES: nothing resident yet, over the catalog Save's blocks were
  // renumbered into. Reads what Save wrote, checking each block's parent is
  // in, the bytes fit and the latest chain runs from a root; returns the
  // residents in the order they were saved. `what` names the shadow in
  // errors. The latest chain is pinned by PinLatestChain.
  std::vector<BlockIndex> Load(PolicyStateReader& in, std::string_view what) {
    Grow();
    const std::string w(what);
    const uint64_t n = in.Count(w + " residents", 2);
    std::vector<std::pair<BlockIndex, uint64_t>> order;  // (block, bytes) as saved
    order.reserve(n);
    for (uint64_t i = 0; i < n && in.ok(); ++i) {
      const BlockIndex b = in.Block(w + " resident");
      order.emplace_back(b, in.Varint(w + " resident bytes"));
    }
    std::vector<std::pair<BlockIndex, uint64_t>> by_number(order);
    std::sort(by_number.begin(), by_number.end());
    for (size_t i = 0; i < by_number.size() && in.ok(); ++i) {
      const auto [b, bytes] = by_number[i];
      const BlockIndex parent = (*catalog_)[b].parent;
      if (i > 0 && by_number[i - 1].first == b) {
        in.Fail(w + " residents: a block twice");
      } else if (parent != kNoBlock && !pool_.IsResident(parent)) {
        in.Fail(w + " residents: a block without its parent");
      } else if (bytes > capacity_ - used_) {
        in.Fail(w + " residents: over the capacity");
      } else {
        Insert(b, bytes);
      }
    }
    const uint64_t latest = in.ok() ? in.Count(w + " latest chain") : 0;
    for (uint64_t i = 0; i < latest && in.ok(); ++i) {
      const BlockIndex b = in.Block(w + " latest chain block");
      const BlockIndex parent = latest_.empty() ? kNoBlock : latest_.back();
      if (in.ok() && (*catalog_)[b].parent != parent) {
        in.Fail(w + " latest chain: not a chain from a root");
      }
      latest_.push_back(b);
    }
    std::vector<BlockIndex> blocks;
    if (!in.ok()) return blocks;
    for (const auto& [b, bytes] : order) blocks.push_back(b);
    return blocks;
  }

  // The latest request's hits and admissions (its chain's resident prefix)
  // are pinned until the next request, as they were when it was saved.
  void PinLatestChain() {
    const uint32_t held = pool_.ResidentPrefix(latest_);
    for (uint32_t i = 0; i < held; ++i) pool_.Pin(latest_[i]);
  }

 private:
  // Per block: 1 if it is resident and it and every ancestor survive the
  // compaction `renumber` (a block a compaction forgets leaves the shadow
  // with everything below it; the real pool keeps what it holds, so only
  // blocks a shadow alone holds are forgotten). `kept` counts them.
  std::vector<uint8_t> KeptThroughCompaction(std::span<const BlockIndex> renumber,
                                             uint64_t& kept) const {
    std::vector<uint8_t> keep(catalog_->size(), 0);
    kept = 0;
    for (BlockIndex b = 0; b < catalog_->size(); ++b) {  // parents come before children
      const BlockIndex parent = (*catalog_)[b].parent;
      keep[b] = pool_.IsResident(b) && Renumbered(renumber, b) != kNoBlock &&
                (parent == kNoBlock || keep[parent]);
      kept += keep[b];
    }
    return keep;
  }

  const BlockCatalog* catalog_;
  PoolState pool_;
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<uint64_t> bytes_;     // per block: its bytes when copied in (if resident)
  std::vector<BlockIndex> latest_;  // the latest request's chain
};

}  // namespace kvlearn
