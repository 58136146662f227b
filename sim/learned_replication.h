// The `learned` router/replicator: routes each request to the prefill node
// where it costs least, and copies the prompt's shared prefix from the node
// holding it to the chosen node when waiting for that copy beats
// recomputing, with the learned model's burst prediction weighing in the GPU
// time each choice takes.
//
// Per arrival:
//  1. Burst prediction. The shared prefix is the leading blocks of the prompt
//     that earlier arrivals used (its own AccessHistory over arrivals). After
//     recording the arrival, the prefix's last block is scored with the one
//     FeatureExtractor (pool features from the global pool) and the model
//     gives p = P(that block is used again within its shortest horizon): is
//     another request of this prefix coming within seconds?
//  2. Routing and replication. For each node n, with m_n its matched blocks
//     (ClusterView) and s the node holding (or computing) the longest match
//     m_s, two options:
//       local(n) = BacklogMs(n) + (1 + w) * ServiceMs(n, m_n blocks in HBM)
//       copy(n)  = max(BacklogMs(n), ReadyMs(s) + copy time of blocks
//                  [m_n, m_s)) + (1 + w) * ServiceMs(n, m_s blocks in HBM)
//     (ServiceMs: loads from the node's DRAM or the pool where cheaper, plus
//     prefill of the rest). The first terms are the request's estimated
//     TTFT; w * work is what its GPU time costs the burst's next request,
//     which comes with probability p and, spread over N nodes, queues behind
//     it with probability ~1/N: w = p / N. The request goes to the node and
//     option of least cost; for the copy option the copy is ordered to that
//     node. So a predicted burst tips near-ties between recomputing the
//     prefix and waiting for a copy (the node serves other requests while
//     it waits) towards the copy, and a lone request never pays for one.
// No copies ahead of time: a copy ordered when the request that needs it is
// routed starts as early as a push would (both wait for the source to hold
// the prefix), so a push could only save a later request the copy time, with
// probability < 1, for the same bytes: never worth it in this cost model.
// (Measured: pushing while p^j * (R - C) > C to the j-th least busy node
// doubled the bytes copied and did not lower TTFT.)
//
// Not thread-safe: one instance per replay.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/pool_state.h"
#include "features/access_history.h"
#include "features/feature_extractor.h"
#include "models/learned_model.h"
#include "sim/replication_policy.h"

namespace kvlearn {

class LearnedReplication final : public ReplicationPolicy {
 public:
  // REQUIRES: model != nullptr with at least one output.
  LearnedReplication(std::shared_ptr<const LearnedModel> model, FeatureConfig features);

  std::string_view name() const override { return "learned"; }
  bool OnArrival(const RouteRequest& request, const ClusterView& view,
                 ReplicationOrder& order) override;
  uint32_t Route(const RouteRequest& request, const ClusterView& view) override;
  // Arrivals for which it ordered a copy.
  uint64_t triggers() const override { return triggers_; }

  // The last arrival's burst probability p (0 when it shared no prefix); for
  // tests.
  double last_reuse_probability() const { return p_; }

 private:
  // P(reuse within the shortest horizon) of the block after recording.
  double ReuseProbability(BlockIndex b, int64_t now_ms, const ClusterView& view);

  std::shared_ptr<const LearnedModel> model_;
  FeatureExtractor extractor_;
  size_t shortest_ = 0;  // output index of the shortest horizon
  std::unique_ptr<AccessHistory> history_;
  std::unique_ptr<PoolState> no_pool_;  // stands in when the replay has none
  uint32_t route_ = kNoNode;            // decided in OnArrival, returned by Route
  double p_ = 0;
  uint64_t triggers_ = 0;
  std::vector<float> probabilities_;
  std::vector<uint32_t> matched_;
  std::vector<uint64_t> bytes_;  // prefix sums of block bytes over the chain
};

}  // namespace kvlearn
