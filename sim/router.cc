#include "sim/router.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sim/routed_prefixes.h"

namespace kvlearn {
namespace {

constexpr std::array<std::string_view, 6> kRouterNames = {
    "round-robin", "least-load", "cache-aware", "cache-aware-approx", "burst-replicate", "learned"};

uint32_t LeastLoaded(const ClusterView& view) {
  uint32_t best = 0;
  for (uint32_t n = 1; n < view.nodes(); ++n) {
    if (view.Load(n) < view.Load(best)) best = n;
  }
  return best;
}

class RoundRobinRouter final : public Router {
 public:
  std::string_view name() const override { return "round-robin"; }
  uint32_t Route(const RouteRequest&, const ClusterView& view) override {
    return next_++ % view.nodes();
  }

 private:
  uint64_t next_ = 0;
};

class LeastLoadRouter final : public Router {
 public:
  std::string_view name() const override { return "least-load"; }
  uint32_t Route(const RouteRequest&, const ClusterView& view) override {
    return LeastLoaded(view);
  }
};

// SGLang's rule (router.h). `approx` picks what it matches against: false,
// the node's HBM as it is (ClusterView::MatchedBlocks, what an index fed by
// the engines' KV cache events sees), and the bytes cached there; true, only
// what the router itself sent to each node (RoutedPrefixes, sgl-router's
// default), and the tokens it remembers there.
class CacheAwareRouter final : public Router {
 public:
  CacheAwareRouter(const CacheAwareOptions& o, bool approx) : o_(o), approx_(approx) {}
  std::string_view name() const override { return approx_ ? "cache-aware-approx" : "cache-aware"; }

  uint32_t Route(const RouteRequest& r, const ClusterView& view) override {
    if (approx_) TrimOnSchedule(r.time_ms, view);
    const uint32_t n = Choose(r, view);
    if (approx_) routed_[n].Route(r.chain);  // also when balancing, as sgl-router does
    return n;
  }

 private:
  uint32_t Choose(const RouteRequest& r, const ClusterView& view) const {
    uint32_t max_load = 0, min_load = std::numeric_limits<uint32_t>::max();
    for (uint32_t n = 0; n < view.nodes(); ++n) {
      max_load = std::max(max_load, view.Load(n));
      min_load = std::min(min_load, view.Load(n));
    }
    const bool imbalanced = max_load - min_load > o_.balance_abs_threshold &&
                            max_load > o_.balance_rel_threshold * min_load;
    if (imbalanced) return LeastLoaded(view);

    uint32_t best = 0, best_match = 0;
    for (uint32_t n = 0; n < view.nodes(); ++n) {
      const uint32_t m = approx_ ? routed_[n].Match(r.chain) : view.MatchedBlocks(n, r.chain);
      if (m > best_match || (m == best_match && view.Load(n) < view.Load(best))) {
        best = n;
        best_match = m;
      }
    }
    uint64_t matched_tokens = 0;
    for (uint32_t i = 0; i < best_match; ++i) matched_tokens += view.catalog()[r.chain[i]].tokens;
    if (r.input_tokens > 0 &&
        static_cast<double>(matched_tokens) / r.input_tokens > o_.cache_threshold) {
      return best;
    }
    // Low match: the node with the most room (smallest cache), ties least load.
    const auto size = [&](uint32_t n) {
      return approx_ ? routed_[n].tokens() : view.CachedBytes(n);
    };
    uint32_t emptiest = 0;
    for (uint32_t n = 1; n < view.nodes(); ++n) {
      const uint64_t a = size(n), b = size(emptiest);
      if (a < b || (a == b && view.Load(n) < view.Load(emptiest))) emptiest = n;
    }
    return emptiest;
  }

  // sgl-router trims every node's memory on a timer started with the router;
  // here the timer starts at the first arrival.
  void TrimOnSchedule(int64_t now_ms, const ClusterView& view) {
    if (routed_.empty()) {
      routed_.assign(view.nodes(), RoutedPrefixes(&view.catalog()));
      next_trim_ms_ = now_ms + IntervalMs();
    }
    if (now_ms < next_trim_ms_) return;
    // Trims due while no request arrived have nothing new to trim: one does.
    for (RoutedPrefixes& node : routed_) node.Trim(o_.max_tree_tokens);
    next_trim_ms_ += ((now_ms - next_trim_ms_) / IntervalMs() + 1) * IntervalMs();
  }
  int64_t IntervalMs() const {
    return std::max<int64_t>(1, static_cast<int64_t>(o_.eviction_interval_s * 1000));
  }

  CacheAwareOptions o_;
  bool approx_;
  std::vector<RoutedPrefixes> routed_;  // per node, when approx_
  int64_t next_trim_ms_ = 0;
};

}  // namespace

std::span<const std::string_view> RouterNames() { return kRouterNames; }

absl::StatusOr<RouterSetup> ResolveRouterName(std::string_view name) {
  if (name == "round-robin" || name == "least-load" || name == "cache-aware" ||
      name == "cache-aware-approx") {
    return RouterSetup{std::string(name), "none"};
  }
  if (name == "burst-replicate") return RouterSetup{"cache-aware", "btb"};
  // The learned replicator routes every request; least-load is never asked.
  if (name == "learned") return RouterSetup{"least-load", "learned"};
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown router '", std::string(name), "' (known: ",
      absl::StrJoin(kRouterNames, ", ",
                    [](std::string* out, std::string_view n) { out->append(n.data(), n.size()); }),
      ")"));
}

absl::StatusOr<std::unique_ptr<Router>> CreateRouter(std::string_view routing,
                                                     const CacheAwareOptions& options) {
  if (routing == "round-robin") return std::make_unique<RoundRobinRouter>();
  if (routing == "least-load") return std::make_unique<LeastLoadRouter>();
  if (routing == "cache-aware") return std::make_unique<CacheAwareRouter>(options, false);
  if (routing == "cache-aware-approx") return std::make_unique<CacheAwareRouter>(options, true);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown routing rule '", std::string(routing), "'"));
}

}  // namespace kvlearn
