// What has happened to each block so far: recent access times, decayed
// counts, how often requests went past it. Fed one request chain at a time
// (Record), read by FeatureExtractor. The simulator, the learner and the
// sidecar each keep one per pool and feed it the same events, which is what
// makes their feature vectors identical.
//
// Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/block_catalog.h"
#include "core/policy_state.h"

namespace kvlearn {

struct BlockHistory {
  static constexpr int kKeptTimes = 6;
  // Most recent access first; only the first `kept` entries are valid.
  std::array<int64_t, kKeptTimes> times_ms{};
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
  std::array<float, 3> decayed{};  // at times_ms[0], time constants kDecaySeconds
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
