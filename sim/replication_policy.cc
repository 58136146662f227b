// The replication policies: none and btb here; learned in
// learned_replication.cc.
#include "sim/replication_policy.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sim/learned_replication.h"

namespace kvlearn {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"none", "btb", "learned"};

class NoReplication final : public ReplicationPolicy {
 public:
  std::string_view name() const override { return "none"; }
  bool OnArrival(const RouteRequest&, const ClusterView&, ReplicationOrder&) override {
    return false;
  }
};

class BtbReplication final : public ReplicationPolicy {
 public:
  explicit BtbReplication(const ReplicationOptions& o) : o_(o), detector_(o.rule) {}
  std::string_view name() const override { return "btb"; }
  uint64_t triggers() const override { return detector_.triggers(); }

  bool OnArrival(const RouteRequest& r, const ClusterView& view, ReplicationOrder& order) override {
    if (!detector_.Observe(r.chain, r.time_ms)) return false;
    // The M least-loaded nodes (ties: lowest index).
    nodes_.resize(view.nodes());
    std::iota(nodes_.begin(), nodes_.end(), 0u);
    std::stable_sort(nodes_.begin(), nodes_.end(),
                     [&](uint32_t a, uint32_t b) { return view.Load(a) < view.Load(b); });
    nodes_.resize(std::min<size_t>(o_.targets, nodes_.size()));
    order.prefix_blocks = o_.rule.prefix_blocks;
    order.targets = nodes_;
    replicated_.insert(detector_.Key(r.chain));
    return true;
  }

  uint32_t Route(const RouteRequest& r, const ClusterView& view) override {
    const BlockIndex key = detector_.Key(r.chain);
    if (key == kNoBlock || !replicated_.contains(key)) return kNoNode;
    uint32_t best = kNoNode;
    for (uint32_t n = 0; n < view.nodes(); ++n) {
      if (view.MatchedBlocks(n, r.chain.first(o_.rule.prefix_blocks)) < o_.rule.prefix_blocks) {
        continue;
      }
      if (best == kNoNode || view.Load(n) < view.Load(best)) best = n;
    }
    return best;
  }

 private:
  ReplicationOptions o_;
  BurstDetector detector_;
  std::vector<uint32_t> nodes_;
  // Keys replicated so far. Grows with the trace's distinct bursts (a few
  // bytes each); a key stays routable while any node holds its prefix.
  absl::flat_hash_set<BlockIndex> replicated_;
};

}  // namespace

std::span<const std::string_view> ReplicationPolicyNames() { return kNames; }

absl::StatusOr<std::unique_ptr<ReplicationPolicy>> CreateReplicationPolicy(
    std::string_view name, const ReplicationOptions& options) {
  if (name == "none") return std::make_unique<NoReplication>();
  if (name == "btb") {
    if (options.rule.arrivals == 0 || options.rule.prefix_blocks == 0 ||
        options.rule.window_ms < 0) {
      return absl::InvalidArgumentError("btb: X and Y must be >= 1 and Z >= 0");
    }
    return std::make_unique<BtbReplication>(options);
  }
  if (name == "learned") {
    if (options.model == nullptr || options.model->num_outputs() == 0) {
      return absl::InvalidArgumentError(
          "the learned router needs a trained model: add --model FILE (kvlearn train)");
    }
    return std::make_unique<LearnedReplication>(options.model, options.features);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown replication policy '", std::string(name), "' (known: ",
      absl::StrJoin(kNames, ", ",
                    [](std::string* out, std::string_view n) { out->append(n.data(), n.size()); }),
      ")"));
}

}  // namespace kvlearn
