// Routers: pick the prefill node a request goes to (docs/design.md, "The world it
// models"). Created by name:
//   round-robin  node i mod N for the i-th request;
//   least-load   fewest outstanding requests (ties: lowest node);
//   cache-aware  SGLang's router (sgl-router, policy cache_aware): if the load
//                is imbalanced, i.e. (max - min) > balance_abs_threshold and
//                max > balance_rel_threshold * min, the least-loaded node;
//                otherwise the node with the longest prefix match (ties: least
//                load) when the matched share of the prompt's tokens exceeds
//                cache_threshold, else the node with the least cached bytes.
//                Defaults are sgl-router's CLI defaults (src/main.rs):
//                cache_threshold 0.3, balance_abs_threshold 64,
//                balance_rel_threshold 1.5; load = outstanding requests.
//                It matches against the node's HBM as it is (and its cached
//                bytes): what a router fed by the engines' KV cache events
//                can know.
//   cache-aware-approx  the same rule over sgl-router's default memory, the
//                prompts it routed to each node (RoutedPrefixes), trimmed to
//                max_tree_tokens every eviction_interval_s; the fallback is
//                the node it remembers the fewest tokens for.
// `burst-replicate` routes like cache-aware: once a prefix is replicated the
// warm nodes tie on the match and the least loaded of them wins, which is the
// BTB routing rule. What makes it differ is its ReplicationPolicy
// (sim/replication_policy.h); RouterSetup pairs the two. `learned` is its
// replication policy alone (sim/learned_replication.h): it routes every
// request itself, by estimated TTFT.
//
// Not thread-safe: one router per replay.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sim/cluster_view.h"

namespace kvlearn {

struct CacheAwareOptions {
  double cache_threshold = 0.3;
  uint32_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  // cache-aware-approx: sgl-router's --max-tree-size (2^26 characters) at
  // about 4 characters per token, and its --eviction-interval.
  uint64_t max_tree_tokens = uint64_t{1} << 24;
  double eviction_interval_s = 120;
};

class Router {
 public:
  virtual ~Router() = default;
  virtual std::string_view name() const = 0;
  virtual uint32_t Route(const RouteRequest& request, const ClusterView& view) = 0;
};

// Router names `--router` accepts, in display order.
std::span<const std::string_view> RouterNames();

// The routing rule and the replication policy a router name stands for.
struct RouterSetup {
  std::string routing;      // "round-robin", "least-load", "cache-aware", "cache-aware-approx"
  std::string replication;  // ReplicationPolicy name; "none" for no replication
};
absl::StatusOr<RouterSetup> ResolveRouterName(std::string_view name);

// Creates a routing rule (RouterSetup::routing).
absl::StatusOr<std::unique_ptr<Router>> CreateRouter(std::string_view routing,
                                                     const CacheAwareOptions& options);

}  // namespace kvlearn
