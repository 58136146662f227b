// AccessHistory::Save and Load (features/access_history.h).
#include <algorithm>

#include "features/access_history.h"

namespace kvlearn {

void AccessHistory::Save(std::span<const BlockIndex> renumber, uint64_t evictions_total,
                         PolicyStateWriter& out) const {
  out.Varint(evictions_total - last_evictions_);
  out.Float(eviction_rate_);
  // A block never accessed has an all-zero record (children are counted on
  // a child's first access, which is an access of its parent too).
  const size_t n = std::min(blocks_.size(), renumber.size());
  uint64_t seen = 0;
  for (BlockIndex b = 0; b < n; ++b) {
    seen += blocks_[b].accesses != 0 && renumber[b] != kNoBlock ? 1 : 0;
  }
  out.Varint(seen);
  for (BlockIndex b = 0; b < n; ++b) {
    const BlockHistory& h = blocks_[b];
    if (h.accesses == 0 || renumber[b] == kNoBlock) continue;
    out.Varint(renumber[b]);  // increasing: renumbering keeps the order
    out.Varint(h.kept);
    // The times themselves, newest first (the format before gaps were kept).
    int64_t time_ms = h.last_ms;
    for (int k = 0; k < h.kept; ++k) {
      out.Signed(time_ms);
      if (k + 1 < h.kept) time_ms -= h.gap_ms[k];
    }
    for (uint32_t v : {h.accesses, h.subtree_accesses, h.children, h.request_blocks, h.tail_blocks,
                       h.reused_children}) {
      out.Varint(v);
    }
    out.Varint(OptionalBlock(renumber, h.fork));  // a forgotten fork is none
    out.Floats(h.decayed);
  }
}

void AccessHistory::Load(PolicyStateReader& in, uint64_t evictions_total) {
  last_evictions_ = evictions_total - in.Varint("history evictions");
  eviction_rate_ = in.Float("history eviction rate");
  // At least a block number, kept, six counts, the fork and three floats each.
  const uint64_t n = in.Count("history records", 9 + 12);
  int64_t last = -1;
  for (uint64_t i = 0; i < n && in.ok(); ++i) {
    const BlockIndex b = in.Block("history block");
    if (in.ok() && static_cast<int64_t>(b) <= last) in.Fail("history blocks: not increasing");
    if (!in.ok()) break;
    last = b;
    if (b >= blocks_.size())
      blocks_.resize(GrownPerBlockSize(size_t{b} + 1, blocks_.size(), *catalog_));
    BlockHistory& h = blocks_[b];
    h.kept = static_cast<uint8_t>(in.Bounded("history kept times", BlockHistory::kKeptTimes));
    int64_t newer_ms = 0;
    for (int k = 0; k < h.kept && in.ok(); ++k) {
      const int64_t time_ms = in.Signed("history time");
      if (k == 0) {
        h.last_ms = time_ms;
      } else if (time_ms > newer_ms) {
        in.Fail("history times: not newest first");
      } else {
        h.gap_ms[k - 1] = KeptGapMs(newer_ms, time_ms);
      }
      newer_ms = time_ms;
    }
    for (uint32_t* v : {&h.accesses, &h.subtree_accesses, &h.children, &h.request_blocks,
                        &h.tail_blocks, &h.reused_children}) {
      *v = static_cast<uint32_t>(in.Bounded("history count", UINT32_MAX));
    }
    h.fork = OptionalBlock(in, "history fork");
    in.Floats("history decayed counts", h.decayed);
    if (in.ok() && h.accesses == 0) in.Fail("history: a record without accesses");
  }
}

}  // namespace kvlearn
