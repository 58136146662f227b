#include "server/resize_estimates.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace kvlearn {

ResizeEstimates::NodeCosts& ResizeEstimates::Of(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto& slot = nodes_[node];
  if (slot == nullptr) slot = std::make_unique<NodeCosts>();
  return *slot;
}

CostCounters* ResizeEstimates::Live(const std::string& node) { return &Of(node).live; }

CostCounters* ResizeEstimates::Ghost(const std::string& node, size_t scale) {
  return &Of(node).ghosts[scale];
}

std::string ResizeEstimates::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  if (nodes_.empty()) return out;
  std::vector<LabeledCosts> all;
  std::vector<LabeledCosts> ghosts;
  for (const auto& [node, c] : nodes_) {
    all.push_back({absl::StrCat("node=\"", node, "\",scale=\"1\""), &c->live});
    for (size_t i = 0; i < kResizeScales.size(); ++i) {
      LabeledCosts ghost{absl::StrCat("node=\"", node, "\",scale=\"", kResizeScaleLabels[i], "\""),
                         &c->ghosts[i]};
      all.push_back(ghost);
      ghosts.push_back(std::move(ghost));
    }
  }
  AppendCostSeries("kvlearn_resize",
                   "A node's pools at `scale` x their configured bytes under its live policy "
                   "(scale 1: the live pools themselves): ",
                   all, &out);
  AppendSkippedSeries("kvlearn_resize",
                      "Arrivals a ghost pool did not serve (--resize-max-blocks reached, or its "
                      "policy broke its contract), so not in its other counters.",
                      ghosts, &out);
  return out;
}

}  // namespace kvlearn
