#include "sim/learned_replication.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "features/feature_schema.h"

namespace kvlearn {

LearnedReplication::LearnedReplication(std::shared_ptr<const LearnedModel> model,
                                       FeatureConfig features)
    : model_(std::move(model)), extractor_(features) {
  const auto& horizons = model_->metadata().horizons_seconds;
  shortest_ =
      static_cast<size_t>(std::min_element(horizons.begin(), horizons.end()) - horizons.begin());
  probabilities_.resize(model_->num_outputs());
}

double LearnedReplication::ReuseProbability(BlockIndex b, int64_t now_ms, const ClusterView& view) {
  const PoolState* pool = view.GlobalPool();
  if (pool == nullptr) {
    // No pool: an empty one of size 0 (occupancy reads 1, like a full pool).
    if (!no_pool_) no_pool_ = std::make_unique<PoolState>(&view.catalog(), 0);
    pool = no_pool_.get();
  }
  std::array<float, kNumFeatures> x;
  extractor_.Extract(b, now_ms, view.catalog(), *history_, *pool, x);
  model_->Predict(x, probabilities_);
  return probabilities_[shortest_];
}

bool LearnedReplication::OnArrival(const RouteRequest& r, const ClusterView& view,
                                   ReplicationOrder& order) {
  if (!history_) history_ = std::make_unique<AccessHistory>(&view.catalog());
  const auto chain = r.chain;
  const BlockCatalog& catalog = view.catalog();

  // 1. Burst prediction on the prefix earlier arrivals shared.
  uint32_t shared = 0;
  while (shared < chain.size() && history_->Of(chain[shared]).accesses > 0) ++shared;
  history_->Record(chain, r.time_ms);
  if (const PoolState* pool = view.GlobalPool()) history_->RecordEvictions(pool->evictions());
  p_ = shared > 0 ? ReuseProbability(chain[shared - 1], r.time_ms, view) : 0.0;

  // 2. Route by estimated cost, with or without a copy.
  uint64_t chain_tokens = 0;
  bytes_.assign(chain.size() + 1, 0);
  for (size_t i = 0; i < chain.size(); ++i) {
    chain_tokens += catalog[chain[i]].tokens;
    bytes_[i + 1] = bytes_[i] + catalog[chain[i]].bytes;
  }
  const uint64_t input = std::max<uint64_t>(r.input_tokens, chain_tokens);
  const uint32_t nodes = view.nodes();
  matched_.resize(nodes);
  uint32_t source = kNoNode;
  double source_ready = 0;
  for (uint32_t n = 0; n < nodes; ++n) {
    matched_[n] = view.MatchedBlocks(n, chain);
    if (matched_[n] == 0) continue;
    if (source != kNoNode && matched_[n] < matched_[source]) continue;
    const double ready = view.ReadyMs(n, chain.first(matched_[n]));
    if (source == kNoNode || matched_[n] > matched_[source] || ready < source_ready) {
      source = n;
      source_ready = ready;
    }
  }
  const uint32_t best_match = source == kNoNode ? 0 : matched_[source];
  // Each option costs its estimated TTFT plus w x the GPU time it takes on
  // the node: the next request of the prefix comes with probability p and,
  // spread over the nodes, lands behind that work with probability ~1/N. A
  // request waiting for a copy leaves its node free meanwhile.
  const double w = p_ / nodes;
  route_ = 0;
  double best_cost = std::numeric_limits<double>::infinity();
  bool best_copies = false;
  for (uint32_t n = 0; n < nodes; ++n) {
    const double backlog = view.BacklogMs(n);
    const double work = view.ServiceMs(n, chain, input, matched_[n]);
    double cost = backlog + (1 + w) * work;
    bool copies = false;
    if (matched_[n] < best_match) {
      const double arrives = source_ready + view.CopyMs(bytes_[best_match] - bytes_[matched_[n]]);
      const double warm_work = view.ServiceMs(n, chain, input, best_match);
      const double with_copy = std::max(backlog, arrives) + (1 + w) * warm_work;
      if (with_copy < cost) {
        cost = with_copy;
        copies = true;
      }
    }
    if (cost < best_cost) {
      best_cost = cost;
      route_ = n;
      best_copies = copies;
    }
  }
  order.targets.clear();
  order.prefix_blocks = best_match;
  if (best_copies) {
    order.targets.push_back(route_);
    ++triggers_;
  }

  return !order.targets.empty();
}

uint32_t LearnedReplication::Route(const RouteRequest&, const ClusterView& view) {
  return route_ < view.nodes() ? route_ : kNoNode;
}

}  // namespace kvlearn
