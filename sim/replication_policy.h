// Replication policies decide, as each request arrives, whether to copy a
// prefix of its chain ahead of time into other prefill nodes' HBM, and into
// which nodes. The simulator carries the orders out: it copies from a node
// that holds the prefix (or will, once the request computing it finishes)
// over that node's RDMA link, shared with its other transfers, into each
// target's HBM (admitted and evicted by the target's retention policy).
// Targets that already hold or are receiving the prefix are skipped.
//
// Created by name:
//   none  never replicates;
//   btb   the "Biting the Bullet" rule: when the same Y-block prefix arrives X
//         times within Z seconds (BurstDetector), copy those Y blocks to the M
//         least-loaded nodes, and route later requests with that prefix to the
//         least-loaded node that holds (or is receiving) it. Defaults X = 2,
//         Z = 1 s, M = 4; Y is a flag (BTB's published key is 128 blocks of
//         512 tokens).
//   learned the learned model's burst prediction and the cost model decide
//         where each request goes and when and how widely to copy
//         (sim/learned_replication.h). Needs `model`.
//
// Not thread-safe: one policy per replay.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "features/feature_extractor.h"
#include "models/learned_model.h"
#include "sim/burst_detector.h"
#include "sim/cluster_view.h"

namespace kvlearn {

struct ReplicationOptions {
  BurstRule rule;        // X, Z, Y
  uint32_t targets = 4;  // M
  // learned: the reuse model and how its features price a transfer.
  std::shared_ptr<const LearnedModel> model;
  FeatureConfig features;
};

// Copy the first `prefix_blocks` blocks of the arriving request's chain to
// each node in `targets`.
struct ReplicationOrder {
  uint32_t prefix_blocks = 0;
  std::vector<uint32_t> targets;
};

class ReplicationPolicy {
 public:
  virtual ~ReplicationPolicy() = default;
  virtual std::string_view name() const = 0;
  // Called for every arrival before it is routed. Returns false for no copy.
  virtual bool OnArrival(const RouteRequest& request, const ClusterView& view,
                         ReplicationOrder& order) = 0;
  // Called after OnArrival: a node to route the request to, overriding the
  // router, or kNoNode to leave it to the router. BTB routes a request whose
  // burst prefix it replicated to the least-loaded node holding that prefix.
  static constexpr uint32_t kNoNode = UINT32_MAX;
  virtual uint32_t Route(const RouteRequest& request, const ClusterView& view) { return kNoNode; }
  // Burst triggers so far (0 for policies without a detector).
  virtual uint64_t triggers() const { return 0; }
};

std::span<const std::string_view> ReplicationPolicyNames();

absl::StatusOr<std::unique_ptr<ReplicationPolicy>> CreateReplicationPolicy(
    std::string_view name, const ReplicationOptions& options);

}  // namespace kvlearn
