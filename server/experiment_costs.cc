#include "server/experiment_costs.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/request_price.h"

namespace kvlearn {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// One quantity's series for every counter set of a kind.
struct Quantity {
  const char* suffix;
  const char* help;
  std::string (*value)(const CostCounters&);
};

std::string Int(const std::atomic<uint64_t>& v) { return absl::StrCat(v.load(kRelaxed)); }
std::string Seconds(double s) { return absl::StrFormat("%.9f", s); }

const Quantity kQuantities[] = {
    {"requests_total", "Request arrivals served (count).",
     [](const CostCounters& c) { return Int(c.requests); }},
    {"block_hits_total", "Blocks of the arrivals' chains found in the pool (count).",
     [](const CostCounters& c) { return Int(c.block_hits); }},
    {"block_misses_total", "Blocks of the arrivals' chains not in the pool (count).",
     [](const CostCounters& c) { return Int(c.block_misses); }},
    {"loaded_bytes_total", "Bytes of the hit blocks, loaded pool -> prefill node.",
     [](const CostCounters& c) { return Int(c.loaded_bytes); }},
    {"admitted_bytes_total", "Bytes of the blocks the pool took in, prefill node -> pool.",
     [](const CostCounters& c) { return Int(c.admitted_bytes); }},
    {"recomputed_tokens_total", "Input tokens not covered by hit blocks (count).",
     [](const CostCounters& c) { return Int(c.recomputed_tokens); }},
    {"prefill_gpu_seconds_total", "Prefill GPU-seconds of the recomputed tokens.",
     [](const CostCounters& c) { return Seconds(c.prefill_gpu_seconds.load(kRelaxed)); }},
    {"transfer_seconds_total", "Seconds of loads and admission copies at the link's bandwidth.",
     [](const CostCounters& c) { return Seconds(c.transfer_seconds.load(kRelaxed)); }},
    {"cost_seconds_total", "prefill_gpu_seconds + transfer_seconds (compare's cost_seconds).",
     [](const CostCounters& c) { return Seconds(c.cost_seconds()); }},
};

}  // namespace

void CostCounters::Charge(const CostModel& cost, const RequestTally& r) {
  // Priced and summed as the pool replay does (sim/replay_accounting.h and
  // AddRequest), in its order, so one node's sums are its sums exactly.
  const RequestPrice p =
      PriceRequest(cost, r.hit_tokens, r.input_tokens, r.loaded_bytes, r.admitted_bytes);
  requests.fetch_add(1, kRelaxed);
  block_hits.fetch_add(r.hit_blocks, kRelaxed);
  block_misses.fetch_add(r.blocks - r.hit_blocks, kRelaxed);
  loaded_bytes.fetch_add(r.loaded_bytes, kRelaxed);
  admitted_bytes.fetch_add(r.admitted_bytes, kRelaxed);
  recomputed_tokens.fetch_add(r.input_tokens - r.hit_tokens, kRelaxed);
  prefill_gpu_seconds.fetch_add(cost.GpusPerInstance() * p.prefill_ms / 1000.0, kRelaxed);
  transfer_seconds.fetch_add(p.transfer_ms / 1000.0, kRelaxed);
}

CostCounters* ExperimentCosts::Arm(const std::string& arm) {
  absl::MutexLock lock(&mu_);
  auto& slot = arms_[arm];
  if (slot == nullptr) slot = std::make_unique<CostCounters>();
  return slot.get();
}

CostCounters* ExperimentCosts::Shadow(const std::string& shadow, const std::string& arm) {
  absl::MutexLock lock(&mu_);
  auto& slot = shadows_[{shadow, arm}];
  if (slot == nullptr) slot = std::make_unique<CostCounters>();
  return slot.get();
}

void AppendCostSeries(absl::string_view family, absl::string_view help,
                      std::span<const LabeledCosts> sets, std::string* out) {
  for (const Quantity& q : kQuantities) {
    const std::string name = absl::StrCat(family, "_", q.suffix);
    absl::StrAppend(out, "# HELP ", name, " ", help, q.help, "\n# TYPE ", name, " counter\n");
    for (const LabeledCosts& s : sets) {
      absl::StrAppend(out, name, "{", s.labels, "} ", q.value(*s.costs), "\n");
    }
  }
}

void AppendSkippedSeries(absl::string_view family, absl::string_view help,
                         std::span<const LabeledCosts> sets, std::string* out) {
  const std::string name = absl::StrCat(family, "_requests_skipped_total");
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
  for (const LabeledCosts& s : sets) {
    absl::StrAppend(out, name, "{", s.labels, "} ", Int(s.costs->requests_skipped), "\n");
  }
}

std::string ExperimentCosts::Render() const {
  absl::MutexLock lock(&mu_);
  std::vector<LabeledCosts> arms;
  for (const auto& [arm, c] : arms_) arms.push_back({absl::StrCat("arm=\"", arm, "\""), c.get()});
  std::vector<LabeledCosts> shadows;
  for (const auto& [key, c] : shadows_) {
    shadows.push_back(
        {absl::StrCat("shadow=\"", key.first, "\",arm=\"", key.second, "\""), c.get()});
  }
  std::string out;
  AppendCostSeries("kvlearn_arm", "Live arm, its nodes: ", arms, &out);
  if (shadows.empty()) return out;
  AppendCostSeries("kvlearn_shadow",
                   "Shadow policy on the nodes of a live arm, had it decided: ", shadows, &out);
  AppendSkippedSeries("kvlearn_shadow",
                      "Arrivals a shadow did not serve (--shadow-max-blocks reached, or its policy "
                      "broke its contract), so not in its other counters.",
                      shadows, &out);
  return out;
}

}  // namespace kvlearn
