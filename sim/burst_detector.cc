#include "sim/burst_detector.h"

#include <vector>

namespace kvlearn {

bool BurstDetector::Observe(std::span<const BlockIndex> chain, int64_t time_ms) {
  if (++calls_ % 4096 == 0) Sweep(time_ms);
  const BlockIndex key = Key(chain);
  if (key == kNoBlock) return false;
  std::deque<int64_t>& times = recent_[key];
  times.push_back(time_ms);
  while (time_ms - times.front() > rule_.window_ms) times.pop_front();
  if (times.size() < rule_.arrivals) return false;
  times.clear();
  ++triggers_;
  return true;
}

void BurstDetector::Sweep(int64_t now_ms) {
  std::vector<BlockIndex> stale;
  for (const auto& [key, times] : recent_) {
    if (times.empty() || now_ms - times.back() > rule_.window_ms) stale.push_back(key);
  }
  for (BlockIndex key : stale) recent_.erase(key);
}

}  // namespace kvlearn
