// What has happened to each block so far: recent access times, decayed
// counts, how often requests went past it. Fed one request chain at a time
// (Record), read by FeatureExtractor. The simulator, the learner and the
// sidecar each keep one per pool and feed it the same events, which is what
// makes their feature vectors identical.
//
// Not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

// later - earlier in ms as a kept gap: 0 if time went back, at most UINT32_MAX.
inline uint32_t KeptGapMs(int64_t later, int64_t earlier) {
  if (later <= earlier) return 0;
  const uint64_t gap = static_cast<uint64_t>(later) - static_cast<uint64_t>(earlier);
  return static_cast<uint32_t>(std::min<uint64_t>(gap, UINT32_MAX));
}

struct BlockHistory {
  static constexpr int kKeptTimes = 6;
  // The latest `kept` access times, as the latest and the gaps between
  // consecutive ones, newest first: gap_ms[g] = time g - time g + 1. Gaps are
  // 4 bytes (over 49.7 days they read as 49.7 days, which every feature
  // reads as long idle), so a record is 72 bytes instead of 96.
  int64_t last_ms = 0;
  std::array<uint32_t, kKeptTimes - 1> gap_ms{};
  uint8_t kept = 0;
  uint32_t accesses = 0;
  uint32_t subtree_accesses = 0;  // accesses whose request continued deeper
  uint32_t children = 0;          // distinct children seen
  uint32_t request_blocks = 0;    // chain length of the latest request using it
  uint32_t tail_blocks = 0;       // blocks after it in that chain
  uint32_t reused_children = 0;   // children accessed more than once
  // Where the run of new blocks it arrived in left known ground: the
  // deepest block of its first request seen before that request (kNoBlock
  // for a run from the root). Fixed at the first access.
  BlockIndex fork = kNoBlock;
  std::array<float, 3> decayed{};  // at last_ms, time constants kDecaySeconds
};

class AccessHistory {
 public:
  static constexpr std::array<double, 3> kDecaySeconds = {60, 600, 3600};

  explicit AccessHistory(const BlockCatalog* catalog) : catalog_(catalog) {}

  // A request used `chain` (root first) at `time_ms`. Times must not go back.
  void Record(std::span<const BlockIndex> chain, int64_t time_ms);

  // History of b; an all-zero record for a block never seen.
  const BlockHistory& Of(BlockIndex b) const { return b < blocks_.size() ? blocks_[b] : kEmpty; }

  // Evictions per request, exponentially averaged over ~100 requests; the
  // caller reports the pool's eviction counter once per request.
  void RecordEvictions(uint64_t evictions_total);
  float eviction_rate() const { return eviction_rate_; }

  // For snapshots and compactions (core/policy_state.h), in
  // access_history_state.cc: the record of every block seen and kept
  // (numbers through `renumber`) and the eviction rate. `evictions_total` is
  // the pool's counter now: a rebuilt pool's counter starts again at 0, so
  // what is saved is how many evictions the next RecordEvictions will count.
  void Save(std::span<const BlockIndex> renumber, uint64_t evictions_total,
            PolicyStateWriter& out) const;
  // REQUIRES: a history that recorded nothing yet.
  void Load(PolicyStateReader& in, uint64_t evictions_total);

 private:
  inline static const BlockHistory kEmpty{};
  const BlockCatalog* catalog_;
  std::vector<BlockHistory> blocks_;
  uint64_t last_evictions_ = 0;
  float eviction_rate_ = 0;
};

}  // namespace kvlearn
