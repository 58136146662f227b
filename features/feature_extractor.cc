#include "features/feature_extractor.h"

#include <array>
#include <cmath>

namespace kvlearn {
namespace {

constexpr double kMissingGapSeconds = 86400;  // "never": a day, far past any horizon

float Log1p(double x) { return static_cast<float>(std::log1p(x)); }

// Most features are log1p of a small count or of the "never" gap; these are
// the same floats Log1p gives, computed once instead of once per block
// scored (libm's log1p was ~9% of a learned replay).
constexpr uint32_t kTabledCounts = 256;
const std::array<float, kTabledCounts> kCountLog1p = [] {
  std::array<float, kTabledCounts> t{};
  for (uint32_t n = 0; n < kTabledCounts; ++n) t[n] = Log1p(n);
  return t;
}();
const float kMissingGapLog1p = Log1p(kMissingGapSeconds);

float Log1pCount(uint32_t n) { return n < kTabledCounts ? kCountLog1p[n] : Log1p(n); }

// Seconds between h's g-th and (g+1)-th latest accesses.
double GapSeconds(const BlockHistory& h, int g) { return h.gap_ms[g] / 1000.0; }

}  // namespace

void FeatureExtractor::Extract(BlockIndex b, int64_t now_ms, const BlockCatalog& catalog,
                               const AccessHistory& history, const PoolState& pool,
                               std::span<float, kNumFeatures> out) const {
  const BlockMeta& m = catalog[b];
  const BlockHistory& h = history.Of(b);
  const double r_ms = m.recompute_gpu_ms;
  const double t_ms = TransferMs(m);
  const double saving = r_ms - t_ms;
  const auto seconds_between = [](int64_t later, int64_t earlier) {
    return static_cast<double>(later - earlier) / 1000.0;
  };

  out[kDepth] = static_cast<float>(m.depth);
  out[kPrefixTokensLog] = Log1p(static_cast<double>(m.depth) * 512 + m.tokens);
  out[kBlockTokens] = static_cast<float>(m.tokens / 512.0);
  out[kChildrenLog] = Log1pCount(h.children);
  out[kIsLeaf] = pool.IsLeaf(b) ? 1.0f : 0.0f;
  out[kBlockBytesLog] = Log1p(static_cast<double>(m.bytes));
  out[kRecomputeMsLog] = Log1p(r_ms);
  out[kTransferMsLog] = Log1p(t_ms);
  out[kSavingMsLog] = static_cast<float>(std::copysign(std::log1p(std::abs(saving)), saving));
  out[kAgeLog] = h.kept ? Log1p(seconds_between(now_ms, h.last_ms)) : kMissingGapLog1p;
  for (int g = 0; g < 4; ++g) {
    out[kGap1Log + g] = g + 1 < h.kept ? Log1p(GapSeconds(h, g)) : kMissingGapLog1p;
  }
  for (size_t k = 0; k < h.decayed.size(); ++k) {
    out[kDecayed1mLog + k] =
        h.kept ? Log1p(h.decayed[k] * std::exp(-seconds_between(now_ms, h.last_ms) /
                                               AccessHistory::kDecaySeconds[k]))
               : Log1pCount(0);
  }
  out[kAccessesLog] = Log1pCount(h.accesses);
  out[kSubtreeAccessesLog] = Log1pCount(h.subtree_accesses);
  int within_1s = 0, within_10s = 0;
  int64_t age_ms = now_ms - h.last_ms;  // of the i-th latest access
  for (int i = 0; i < h.kept; ++i) {
    if (i > 0) age_ms += h.gap_ms[i - 1];
    within_1s += age_ms <= 1000;
    within_10s += age_ms <= 10000;
  }
  out[kBurst1s] = static_cast<float>(within_1s);
  out[kBurst10s] = static_cast<float>(within_10s);
  out[kPoolOccupancy] = pool.capacity_bytes()
                            ? static_cast<float>(static_cast<double>(pool.used_bytes()) /
                                                 static_cast<double>(pool.capacity_bytes()))
                            : 1.0f;
  out[kEvictionRate] = history.eviction_rate();
  out[kTailBlocksLog] = Log1pCount(h.tail_blocks);
  out[kRequestBlocksLog] = Log1pCount(h.request_blocks);
  const BlockHistory& fork = history.Of(h.fork);  // all zero for a run from the root
  out[kForkRunsLog] = Log1pCount(fork.children);
  out[kForkReusedLog] = Log1pCount(fork.reused_children);
  out[kForkGapLog] = fork.kept >= 2 ? Log1p(GapSeconds(fork, 0)) : kMissingGapLog1p;
  out[kOriginTurnLog] = Log1pCount(m.origin_turn);
  // One-hot over text..file, which RequestType lists in the features' order.
  static_assert(kOriginFile - kOriginText ==
                static_cast<int>(RequestType::kFile) - static_cast<int>(RequestType::kText));
  const int type = static_cast<int>(m.origin_type) - static_cast<int>(RequestType::kText);
  for (int t = 0; t <= kOriginFile - kOriginText; ++t) {
    out[kOriginText + t] = type == t ? 1.0f : 0.0f;
  }
}

}  // namespace kvlearn
