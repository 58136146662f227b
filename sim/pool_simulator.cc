#include "sim/pool_simulator.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "policies/learned_policy.h"
#include "policies/policy_driver.h"
#include "sim/replay_accounting.h"

namespace kvlearn {

absl::Status ServeRequest(const ReplayTrace& replay, uint32_t request_index, PolicyDriver& tier,
                          RequestOutcome& out) {
  const TraceRequest& r = replay.trace->requests[request_index];
  const std::span<const BlockIndex> chain(replay.blocks.data() + r.first_block, r.num_blocks);
  const BlockCatalog& catalog = replay.catalog;
  const AccessInfo access{r.timestamp_ms, request_index, r.first_block};

  const uint32_t hits = tier.Lookup(chain);
  tier.Touch(chain, hits, access);
  for (uint32_t i = 0; i < hits; ++i) {
    out.hit_tokens += replay.trace->TokensOfBlock(r, i);
    out.loaded_bytes += catalog[chain[i]].bytes;
  }
  out.hit_blocks = hits;
  return tier.Admit(chain, hits, r.num_blocks, access, out.admitted_bytes, out.evicted_blocks,
                    [](BlockIndex) {});
}

namespace {

// The follower's switches and the expert that led most of `led` (evaluated
// requests per expert).
FollowerSummary SummarizeFollower(const LearnedPolicy& follower, std::span<const uint64_t> led) {
  FollowerSummary summary{.switches = follower.switches()};
  uint64_t evaluated = 0;
  size_t main = 0;
  for (size_t e = 0; e < led.size(); ++e) {
    evaluated += led[e];
    if (led[e] > led[main]) main = e;
  }
  if (evaluated > 0) {
    summary.main_leader = follower.expert(main).name();
    summary.main_leader_share = static_cast<double>(led[main]) / evaluated;
  }
  return summary;
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayPool(const ReplayTrace& replay, const CostModel& cost,
                                        std::string_view policy_name,
                                        const PoolReplayOptions& options) {
  if (!(options.eval_from >= 0 && options.eval_from < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_from must be in [0, 1), got ", options.eval_from));
  }
  const uint32_t nodes = cost.hardware().prefill_nodes;
  if (nodes == 0) return absl::InvalidArgumentError("prefill_nodes must be at least 1");
  PolicyDriver tier(&replay.catalog, options.pool_bytes);
  const PoolState& pool = tier.pool();
  PolicyEnv env = MakePolicyEnv(cost, options.model, &replay.next_use);
  env.feature_sink = options.feature_sink;
  const absl::Status started = options.make_policy
                                   ? tier.StartPolicy(options.make_policy, std::move(env))
                                   : tier.StartPolicy(policy_name, std::move(env));
  if (!started.ok()) return started;

  const Trace& trace = *replay.trace;
  const auto n = static_cast<uint32_t>(trace.requests.size());
  const auto eval_start = static_cast<uint32_t>(options.eval_from * n);

  ReplayAccounting accounting(cost, nodes, eval_start);
  const auto* follower = dynamic_cast<const LearnedPolicy*>(&tier.policy());
  std::vector<uint64_t> led;  // per expert of a follower: evaluated requests it led
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t ri = 0; ri < n; ++ri) {
    RequestOutcome o;
    if (auto s = ServeRequest(replay, ri, tier, o); !s.ok()) return s;
    accounting.Record(ri, trace.requests[ri], o);
    if (follower != nullptr && ri >= eval_start) {
      led.resize(std::max(led.size(), follower->num_experts()), 0);
      ++led[follower->leader()];
    }
    if (options.after_request) options.after_request(ri, pool);
    if (options.requests_done) options.requests_done->fetch_add(1, std::memory_order_relaxed);
  }
  // The request loop alone: the summary below (TTFT percentiles) is not replay.
  const double replay_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ReplayResult result = accounting.Finish();
  result.policy = std::string(policy_name);
  if (follower != nullptr) result.follower = SummarizeFollower(*follower, led);
  result.replay_seconds = replay_seconds;
  result.replayed_accesses = replay.block_accesses();
  return result;
}

absl::StatusOr<uint32_t> SizePoolReplay(const ReplayTrace& replay, const CostModel& cost,
                                        const PoolReplayOptions& options, double target,
                                        ReplayResult* lru_result) {
  PoolReplayOptions lru_options;
  lru_options.pool_bytes = options.pool_bytes;
  lru_options.eval_from = options.eval_from;
  auto lru = ReplayPool(replay, cost, "lru", lru_options);
  if (!lru.ok()) return lru.status();
  if (lru_result != nullptr) *lru_result = *lru;
  return InstancesForUtilization(*lru, target);
}

}  // namespace kvlearn
