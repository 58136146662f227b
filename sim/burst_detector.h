// The burst rule of "Biting the Bullet" (BTB, JW Labs 2026): a burst is the
// same Y-block prefix arriving X times within Z seconds.
//
// The key of a request is the id of its Y-th block (block Y-1); since a block
// id names its whole prefix, equal keys mean equal Y-block prefixes. Requests
// shorter than Y blocks have no key and never count. Observe() reports true on
// the arrival that makes X arrivals of one key within Z (first and last
// arrival at most Z apart, inclusive); the key's window is then cleared, so
// the next trigger needs X fresh arrivals. Times must not decrease.
//
// Memory: one entry per key seen within the last Z; stale keys are swept
// every few thousand calls. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "core/block_catalog.h"

namespace kvlearn {

struct BurstRule {
  uint32_t arrivals = 2;         // X
  int64_t window_ms = 1000;      // Z
  uint32_t prefix_blocks = 128;  // Y (BTB's published key: 65,536 tokens = 128 blocks of 512)
};

class BurstDetector {
 public:
  explicit BurstDetector(BurstRule rule) : rule_(rule) {}

  const BurstRule& rule() const { return rule_; }

  // Key of `chain`, or kNoBlock if it has fewer than Y blocks.
  BlockIndex Key(std::span<const BlockIndex> chain) const {
    return rule_.prefix_blocks > 0 && chain.size() >= rule_.prefix_blocks
               ? chain[rule_.prefix_blocks - 1]
               : kNoBlock;
  }

  // Records an arrival; true if it completes a burst.
  bool Observe(std::span<const BlockIndex> chain, int64_t time_ms);

  uint64_t triggers() const { return triggers_; }

 private:
  void Sweep(int64_t now_ms);

  BurstRule rule_;
  absl::flat_hash_map<BlockIndex, std::deque<int64_t>> recent_;
  uint64_t calls_ = 0;
  uint64_t triggers_ = 0;
};

}  // namespace kvlearn
