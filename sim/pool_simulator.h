// Replays a trace through one global KV pool under one retention policy
// (docs/design.md): requests are spread round-robin over
// the cost model's prefill nodes, each a FIFO queue; a request loads its longest resident
// prefix from the pool over RDMA and recomputes the rest, offering each new
// block to the pool for admission.
//
// TTFT = queue wait + load of the hit prefix + prefill of the missed tokens.
// Counters cover requests from `eval_from` on; earlier ones only warm the pool.
//
// This is the fast path of the replay engine: the pool alone, no per-node
// caches, no link contention. It serves each request through the same
// PolicyDriver (policies/policy_driver.h) the cluster simulator (sim/cluster_simulator.h)
// runs every tier with, so the two apply the policy protocol identically.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/pool_state.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "sim/replay_result.h"
#include "sim/replay_trace.h"

namespace kvlearn {

struct PoolReplayOptions {
  uint64_t pool_bytes = 0;
  double eval_from = 0;  // share of requests that only warm the pool, in [0, 1)
  // For policies that score with a trained model ("learned").
  std::shared_ptr<const LearnedModel> model;
  // Tests only: receives every feature vector a learned policy computes.
  FeatureSink feature_sink;
  // Builds the policy instead of CreatePolicy(policy_name, env) when set; the
  // learner uses it to wrap a policy with a feature recorder.
  PolicyMaker make_policy;
  // Called after every request with its index and the pool; tests use it to
  // check invariants. Leave empty in production runs.
  std::function<void(uint32_t, const PoolState&)> after_request;
  // When set, advanced by one per request served (a progress line reads it;
  // replays run in parallel may share one).
  std::atomic<uint64_t>* requests_done = nullptr;
};

// Serves request `request_index` of `replay` against the pool `tier` drives:
// the resident prefix hits (pinned, reported to the policy deepest first),
// the rest is recomputed and offered for admission root first. Fills `out`
// (start it empty): the blocks hit, and the tokens hit and the bytes loaded,
// admitted and evicted blocks added. The replay's one step, and the tests'
// way to drive a policy request by request.
absl::Status ServeRequest(const ReplayTrace& replay, uint32_t request_index, PolicyDriver& tier,
                          RequestOutcome& out);

// Runs `policy_name` over `replay`. Fails on an unknown policy or when the
// policy breaks the contract (e.g. names a victim that is not an evictable
// leaf).
absl::StatusOr<ReplayResult> ReplayPool(const ReplayTrace& replay, const CostModel& cost,
                                        std::string_view policy_name,
                                        const PoolReplayOptions& options);

// --prefill-nodes auto for the pool replay: the fewest prefill instances at
// which LRU keeps them busy at most `target` of the evaluated window. Busy
// time here does not depend on the count (one global pool, requests dealt
// round-robin), so one LRU replay settles it: InstancesForUtilization.
// `lru_result`, when given, receives that replay.
absl::StatusOr<uint32_t> SizePoolReplay(const ReplayTrace& replay, const CostModel& cost,
                                        const PoolReplayOptions& options, double target,
                                        ReplayResult* lru_result = nullptr);

}  // namespace kvlearn
