#include "features/access_history.h"

#include <algorithm>
#include <cmath>

namespace kvlearn {

void AccessHistory::Record(std::span<const BlockIndex> chain, int64_t time_ms) {
  if (!chain.empty()) {
    const BlockIndex deepest = *std::max_element(chain.begin(), chain.end());
    if (deepest >= blocks_.size()) {
      blocks_.resize(GrownPerBlockSize(size_t{deepest} + 1, blocks_.size(), *catalog_));
    }
  }
  bool previous_new = false;  // chain[i - 1] was first used by this request
  // The blocks a request shares with an earlier one were mostly last used
  // together, so they decay by the same factors: computed once per idle time.
  int64_t decay_dt_ms = INT64_MIN;
  std::array<double, kDecaySeconds.size()> decay{};
  for (size_t i = 0; i < chain.size(); ++i) {
    BlockHistory& h = blocks_[chain[i]];
    const bool is_new = h.accesses == 0;
    const BlockIndex parent = (*catalog_)[chain[i]].parent;
    if (parent != kNoBlock) {
      BlockHistory& up = blocks_[parent];
      if (is_new) {
        ++up.children;
        // A run of new blocks forks where its request left known ground.
        h.fork = i > 0 && chain[i - 1] == parent && previous_new ? up.fork : parent;
      } else if (h.accesses == 1) {
        ++up.reused_children;
      }
    }
    previous_new = is_new;
    if (h.kept > 0) {
      if (time_ms - h.last_ms != decay_dt_ms) {
        decay_dt_ms = time_ms - h.last_ms;
        const double dt_s = static_cast<double>(decay_dt_ms) / 1000.0;
        for (size_t k = 0; k < decay.size(); ++k) decay[k] = std::exp(-dt_s / kDecaySeconds[k]);
      }
      for (size_t k = 0; k < h.decayed.size(); ++k) {
        h.decayed[k] = static_cast<float>(h.decayed[k] * decay[k]);
      }
    }
    for (float& d : h.decayed) d += 1.0f;
    std::copy_backward(h.gap_ms.begin(), h.gap_ms.end() - 1, h.gap_ms.end());
    h.gap_ms[0] = h.kept > 0 ? KeptGapMs(time_ms, h.last_ms) : 0;
    h.last_ms = time_ms;
    h.kept = static_cast<uint8_t>(std::min<int>(h.kept + 1, BlockHistory::kKeptTimes));
    ++h.accesses;
    if (i + 1 < chain.size()) ++h.subtree_accesses;
    h.request_blocks = static_cast<uint32_t>(chain.size());
    h.tail_blocks = static_cast<uint32_t>(chain.size() - 1 - i);
  }
}

void AccessHistory::RecordEvictions(uint64_t evictions_total) {
  const auto fresh = static_cast<float>(evictions_total - last_evictions_);
  last_evictions_ = evictions_total;
  eviction_rate_ = 0.99f * eviction_rate_ + 0.01f * fresh;
}

}  // namespace kvlearn
