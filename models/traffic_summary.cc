#include "models/traffic_summary.h"

#include <algorithm>

namespace kvlearn {
namespace {

// splitmix64's finaliser: trace block ids are often small consecutive
// integers, which a threshold on the raw id would sample by age, not at random.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::array<TrafficQuantity, 4> TrafficQuantities(const TrafficSummary& s) {
  return {TrafficQuantity{"request_rate", "req/s", s.request_rate_per_s},
          TrafficQuantity{"prompt_blocks", "blocks", s.mean_prompt_blocks},
          TrafficQuantity{"block_reuse", "", s.block_reuse_ratio},
          TrafficQuantity{"block_size", "tokens", static_cast<double>(s.block_size_tokens)}};
}

TrafficSummarizer::TrafficSummarizer(uint32_t block_size_tokens, size_t max_tracked_blocks)
    : block_size_tokens_(block_size_tokens),
      max_tracked_(std::max<size_t>(max_tracked_blocks, 1)) {}

void TrafficSummarizer::Add(double arrival_seconds, std::span<const uint64_t> block_ids,
                            bool counted) {
  if (counted) {
    if (requests_ == 0) {
      first_arrival_s_ = last_arrival_s_ = arrival_seconds;
    } else {
      first_arrival_s_ = std::min(first_arrival_s_, arrival_seconds);
      last_arrival_s_ = std::max(last_arrival_s_, arrival_seconds);
    }
    ++requests_;
    blocks_ += block_ids.size();
  }
  for (const uint64_t id : block_ids) {
    if (Mix(id) > threshold_) continue;
    const bool seen = !tracked_.insert(id).second;
    if (counted) {
      ++tracked_accesses_;
      tracked_reuses_ += seen;
    }
  }
  // Full: track half as many blocks from now on, dropping those above the
  // new threshold (the counts so far stay, as a sample of the earlier traffic).
  while (tracked_.size() > max_tracked_ && threshold_ > 0) {
    threshold_ >>= 1;
    absl::erase_if(tracked_, [this](uint64_t id) { return Mix(id) > threshold_; });
  }
}

TrafficSummary TrafficSummarizer::Summary() const {
  TrafficSummary s;
  s.requests = requests_;
  s.block_size_tokens = block_size_tokens_;
  const double span = last_arrival_s_ - first_arrival_s_;
  if (requests_ >= 2 && span > 0) s.request_rate_per_s = static_cast<double>(requests_ - 1) / span;
  if (requests_ > 0) s.mean_prompt_blocks = static_cast<double>(blocks_) / requests_;
  if (tracked_accesses_ > 0) {
    s.block_reuse_ratio = static_cast<double>(tracked_reuses_) / tracked_accesses_;
  }
  return s;
}

double TrafficSummarizer::sampled_share() const {
  return threshold_ == UINT64_MAX ? 1.0
                                  : (static_cast<double>(threshold_) + 1) / 18446744073709551616.0;
}

}  // namespace kvlearn
