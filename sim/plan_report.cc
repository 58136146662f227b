#include "sim/plan_report.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "policies/policy_factory.h"
#include "sim/json_text.h"
#include "sim/report_fields.h"

namespace kvlearn {
namespace {

// Table column title: oracles (which read the future) carry a star.
std::string ColumnName(std::string_view policy) {
  return absl::StrCat(std::string(policy), IsOfflinePolicy(policy) ? "*" : "");
}

std::string PoolText(const Plan& plan, size_t point) {
  const SweepPoint& p = plan.sweep.points[point];
  return absl::StrFormat("%.1f GB (%.3g%%)", Gb(p.pool_bytes), 100 * p.pool_fraction);
}

// The share of the cost gap from lru to `floor_cost` that `policy_cost`
// closes; nullopt when there is no gap.
std::optional<double> GapShare(double lru_cost, double policy_cost, double floor_cost) {
  const double gap = lru_cost - floor_cost;
  if (!(gap > 0)) return std::nullopt;
  return (lru_cost - policy_cost) / gap;
}

struct BoundShare {
  std::string policy;
  std::optional<double> of_bound;   // share of the lru -> lower bound cost gap closed
  std::optional<double> of_belady;  // share of the lru -> belady one, when belady ran
};

// Each policy's (but lru's and no-cache's) share of the cost gap from lru to
// the lower bound at the user's pool; empty without a bound or lru.
std::vector<BoundShare> BoundShares(const Plan& plan) {
  const SweepPoint& point = plan.sweep.points[plan.answers.pool_point];
  const std::vector<std::string>& policies = plan.sweep.policies;
  const auto lru = std::find(policies.begin(), policies.end(), "lru");
  if (!point.cost_bound || lru == policies.end()) return {};
  const auto belady = std::find(policies.begin(), policies.end(), "belady");
  const double w = plan.header.transfer_weight;
  const double lru_cost = point.results[lru - policies.begin()].cost_seconds(w);
  std::vector<BoundShare> out;
  for (size_t k = 0; k < policies.size(); ++k) {
    if (policies[k] == "lru" || policies[k] == "no-cache") continue;
    const double cost = point.results[k].cost_seconds(w);
    BoundShare share{policies[k], GapShare(lru_cost, cost, point.cost_bound->cost_seconds), {}};
    if (belady != policies.end()) {
      share.of_belady =
          GapShare(lru_cost, cost, point.results[belady - policies.begin()].cost_seconds(w));
    }
    out.push_back(std::move(share));
  }
  return out;
}

std::string BoundSharesText(const Plan& plan) {
  const std::vector<BoundShare> shares = BoundShares(plan);
  if (shares.empty()) return "";
  const std::vector<std::string>& policies = plan.sweep.policies;
  const bool belady = std::find(policies.begin(), policies.end(), "belady") != policies.end();
  std::string out = absl::StrFormat(
      "at the pool of --pool-fraction no policy can cost less than %.1f s (the lower bound); "
      "share of the cost gap from lru to the bound each policy closes%s:\n",
      plan.sweep.points[plan.answers.pool_point].cost_bound->cost_seconds,
      belady ? " (from lru to belady in brackets)" : "");
  for (const BoundShare& s : shares) {
    absl::StrAppend(&out, "  ", PaddedTo(ColumnName(s.policy), 17),
                    s.of_bound ? absl::StrFormat("%7.1f%%", 100 * *s.of_bound) : "      -",
                    !belady       ? ""
                    : s.of_belady ? absl::StrFormat("  (%.1f%%)", 100 * *s.of_belady)
                                  : "  (-)",
                    "\n");
  }
  return out;
}

std::string AnswersText(const Plan& plan) {
  const PlanAnswers& a = plan.answers;
  const SweepPoint& largest = plan.sweep.points.back();
  std::string out = absl::StrFormat(
      "no pool (no-cache) costs %.1f s; lru at the largest pool, %s, %.1f s: the full-pool "
      "saving is %.1f s\n",
      a.no_pool_cost_seconds, PoolText(plan, plan.sweep.points.size() - 1),
      a.full_pool_cost_seconds, a.full_pool_saving_seconds());
  if (largest.pool_fraction < 1) {
    out +=
        "(the largest pool is under 100% of the distinct-block bytes: it may evict, so this "
        "is at most what an infinite pool saves)\n";
  }
  if (a.target_pools.empty()) {
    out += "no pool saves anything over no pool: no smallest pool to give\n";
  } else {
    absl::StrAppend(&out,
                    absl::StrFormat("smallest swept pool at which a policy saves >= %.3g%% of "
                                    "that over no pool:\n",
                                    100 * plan.target));
    for (const TargetPool& t : a.target_pools) {
      absl::StrAppend(&out, "  ", PaddedTo(t.policy, 17),
                      t.point ? PoolText(plan, *t.point) : "not reached in the sweep", "\n");
    }
  }
  absl::StrAppend(&out,
                  absl::StrFormat("at the pool of --pool-fraction, %s, saved against lru per hour "
                                  "of traffic (cost s saved / %.0f s window = GPU-hours per hour)",
                                  PoolText(plan, a.pool_point), a.window_seconds),
                  plan.gpu_hour_price ? absl::StrFormat(", and at %g per GPU-hour, money per hour",
                                                        *plan.gpu_hour_price)
                                      : "",
                  ":\n");
  if (a.savings.empty()) out += "  (no policy but lru and no-cache ran)\n";
  for (const PolicySaving& s : a.savings) {
    absl::StrAppend(&out, "  ", PaddedTo(s.policy, 17),
                    s.gpu_hours_per_hour ? absl::StrFormat("%8.3f GPU-h/h", *s.gpu_hours_per_hour)
                                         : std::string("       - GPU-h/h (empty window)"),
                    s.money_per_hour ? absl::StrFormat("  %10.2f per h", *s.money_per_hour) : "",
                    "\n");
  }
  return out;
}

std::string AnswersJson(const Plan& plan) {
  const PlanAnswers& a = plan.answers;
  std::string out =
      absl::StrCat("\"no_pool_cost_seconds\": ", JsonNumber(a.no_pool_cost_seconds),
                   ", \"full_pool_cost_seconds\": ", JsonNumber(a.full_pool_cost_seconds),
                   ", \"full_pool_saving_seconds\": ", JsonNumber(a.full_pool_saving_seconds()),
                   ", \"target_pools\": [");
  for (size_t i = 0; i < a.target_pools.size(); ++i) {
    const TargetPool& t = a.target_pools[i];
    const SweepPoint* p = t.point ? &plan.sweep.points[*t.point] : nullptr;
    absl::StrAppend(&out, i ? ", " : "", "{\"policy\": ", JsonString(t.policy),
                    ", \"pool_fraction\": ", p ? JsonNumber(p->pool_fraction) : "null",
                    ", \"pool_bytes\": ", p ? absl::StrCat(p->pool_bytes) : "null", "}");
  }
  const SweepPoint& at_pool = plan.sweep.points[a.pool_point];
  absl::StrAppend(&out, "], \"cost_lower_bound_seconds\": ",
                  at_pool.cost_bound ? JsonNumber(at_pool.cost_bound->cost_seconds) : "null",
                  ", \"bound_gap_closed\": [");
  const std::vector<BoundShare> shares = BoundShares(plan);
  for (size_t i = 0; i < shares.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "{\"policy\": ", JsonString(shares[i].policy),
                    ", \"share\": ", OptionalJsonNumber(shares[i].of_bound),
                    ", \"belady_share\": ", OptionalJsonNumber(shares[i].of_belady), "}");
  }
  absl::StrAppend(&out, "], \"savings_vs_lru\": [");
  for (size_t i = 0; i < a.savings.size(); ++i) {
    const PolicySaving& s = a.savings[i];
    absl::StrAppend(&out, i ? ", " : "", "{\"policy\": ", JsonString(s.policy),
                    ", \"cost_seconds_saved\": ", JsonNumber(s.cost_seconds_saved),
                    ", \"gpu_hours_per_hour\": ", OptionalJsonNumber(s.gpu_hours_per_hour),
                    ", \"money_per_hour\": ", OptionalJsonNumber(s.money_per_hour), "}");
  }
  return out + "]";
}

}  // namespace

Comparison ComparisonAt(const Plan& plan, size_t point) {
  Comparison c = plan.header;
  c.pool_bytes = plan.sweep.points[point].pool_bytes;
  c.results = plan.sweep.points[point].results;
  FillGapClosed(c);
  return c;
}

namespace {

// What a sampled plan measured, and how it reads (docs/planning.md).
std::string SampleNote(const PlanSample& s) {
  return absl::StrFormat(
      "sampled at rate %g: %d requests (%d block accesses) kept, keyed by the first block of "
      "their chain read by fewer than %d requests (%d blocks read by more are shared, read "
      "first by %d warm-up requests); pools "
      "replayed at %.4g x their unshared bytes plus the shared ones; costs and counts scaled by "
      "1 / %.4g (the sample's share of the no-pool cost); TTFT and utilization are the "
      "sample's\n\n",
      s.rate, s.kept_requests, s.kept_block_accesses, s.shared_threshold, s.shared_blocks,
      s.warmup_requests, s.byte_rate, s.cost_rate);
}

std::string SampleJson(const std::optional<PlanSample>& sample) {
  if (!sample) return "null";
  const PlanSample& s = *sample;
  return absl::StrCat(
      "{\"rate\": ", JsonNumber(s.rate), ", \"kept_requests\": ", s.kept_requests,
      ", \"kept_block_accesses\": ", s.kept_block_accesses,
      ", \"warmup_requests\": ", s.warmup_requests, ", \"shared_blocks\": ", s.shared_blocks,
      ", \"shared_threshold\": ", s.shared_threshold, ", \"byte_rate\": ", JsonNumber(s.byte_rate),
      ", \"cost_rate\": ", JsonNumber(s.cost_rate), "}");
}

}  // namespace

std::string FormatPlanTable(const Plan& plan) {
  const Comparison& h = plan.header;
  std::string out = absl::StrFormat(
      "trace %s: %d requests, %d block accesses evaluated; distinct-block bytes %.1f GB; cost "
      "model %s; %d prefill instances%s; cost = prefill GPU-s + %g x transfer s\n\n",
      h.trace, h.requests, h.block_accesses, Gb(plan.distinct_block_bytes), h.cost_model,
      h.prefill_nodes,
      h.prefill_nodes_auto
          ? absl::StrFormat(" (auto, sized at pool %.3g%%)", 100 * plan.prefill_nodes_sized_at)
          : "",
      h.transfer_weight);
  if (plan.sample) absl::StrAppend(&out, SampleNote(*plan.sample));
  absl::StrAppend(&out,
                  "cost s by pool (lower is better; * = offline oracle, reads the future; bound "
                  "= the lower bound no policy can cost less than; > = the pool of "
                  "--pool-fraction)\n");
  std::vector<size_t> widths;
  std::string header = absl::StrFormat("  %8s %9s", "pool %", "pool GB");
  for (const std::string& p : plan.sweep.policies) {
    widths.push_back(std::max<size_t>(9, ColumnName(p).size()));
    absl::StrAppend(&header, " ", absl::StrFormat("%*s", widths.back(), ColumnName(p)));
  }
  const bool bounded = plan.sweep.points.front().cost_bound.has_value();
  if (bounded) absl::StrAppend(&header, absl::StrFormat(" %9s", "bound"));
  absl::StrAppend(&out, header, "\n");
  for (size_t i = 0; i < plan.sweep.points.size(); ++i) {
    const SweepPoint& point = plan.sweep.points[i];
    absl::StrAppend(
        &out, i == plan.answers.pool_point ? "> " : "  ",
        absl::StrFormat("%8.3g %9.1f", 100 * point.pool_fraction, Gb(point.pool_bytes)));
    for (size_t k = 0; k < point.results.size(); ++k) {
      absl::StrAppend(&out, absl::StrFormat(" %*.1f", widths[k],
                                            point.results[k].cost_seconds(h.transfer_weight)));
    }
    if (point.cost_bound)
      absl::StrAppend(&out, absl::StrFormat(" %9.1f", point.cost_bound->cost_seconds));
    out += "\n";
  }
  std::string saturated;
  for (const SweepPoint& point : plan.sweep.points) {
    if (const std::string rows = SaturatedRows(point.results); !rows.empty()) {
      absl::StrAppend(&saturated, saturated.empty() ? "" : "; ",
                      absl::StrFormat("at %.3g%%: %s", 100 * point.pool_fraction, rows));
    }
  }
  absl::StrAppend(&out, SaturatedNote(saturated), "\n", AnswersText(plan), BoundSharesText(plan));
  return out;
}

std::string FormatPlanJson(const Plan& plan) {
  const Comparison& h = plan.header;
  std::string policies, oracles;
  for (const std::string& p : plan.sweep.policies) {
    absl::StrAppend(&policies, policies.empty() ? "" : ", ", JsonString(p));
    if (IsOfflinePolicy(p)) absl::StrAppend(&oracles, oracles.empty() ? "" : ", ", JsonString(p));
  }
  std::string out = absl::StrCat(
      "{\"trace\": ", JsonString(h.trace), ", \"requests\": ", h.requests,
      ", \"block_accesses\": ", h.block_accesses,
      ", \"window_seconds\": ", JsonNumber(plan.answers.window_seconds),
      ", \"distinct_block_bytes\": ", plan.distinct_block_bytes,
      ", \"cost_model\": ", JsonString(h.cost_model), ", \"prefill_nodes\": ", h.prefill_nodes,
      ", \"prefill_nodes_auto\": ", h.prefill_nodes_auto ? "true" : "false",
      ", \"prefill_nodes_sized_at\": ", JsonNumber(plan.prefill_nodes_sized_at),
      ", \"transfer_weight\": ", JsonNumber(h.transfer_weight), ", \"policies\": [", policies,
      "], \"oracles\": [", oracles, "], \"pool_fraction\": ", JsonNumber(plan.pool_fraction),
      ", \"target\": ", JsonNumber(plan.target),
      ", \"gpu_hour_price\": ", OptionalJsonNumber(plan.gpu_hour_price),
      ", \"sample\": ", SampleJson(plan.sample), ", ", AnswersJson(plan), ", \"sizes\": [");
  for (size_t i = 0; i < plan.sweep.points.size(); ++i) {
    const SweepPoint& p = plan.sweep.points[i];
    absl::StrAppend(
        &out, i ? ", " : "", "{\"pool_fraction\": ", JsonNumber(p.pool_fraction),
        ", \"pool_bytes\": ", p.pool_bytes, ", \"cost_lower_bound_seconds\": ",
        p.cost_bound ? JsonNumber(p.cost_bound->cost_seconds) : "null",
        ", \"comparison\": ", absl::StripSuffix(FormatJson(ComparisonAt(plan, i)), "\n"), "}");
  }
  return out + "]}\n";
}

std::string FormatPlanCsv(const Plan& plan) {
  std::string out;
  for (size_t i = 0; i < plan.sweep.points.size(); ++i) {
    const SweepPoint& p = plan.sweep.points[i];
    const std::string csv = FormatCsv(ComparisonAt(plan, i));
    bool header = true;
    for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipEmpty())) {
      if (header) {
        if (i == 0) {
          absl::StrAppend(&out, "pool_fraction,pool_bytes,cost_lower_bound_seconds,", line, "\n");
        }
        header = false;
        continue;
      }
      absl::StrAppend(&out, JsonNumber(p.pool_fraction), ",", p.pool_bytes, ",",
                      p.cost_bound ? JsonNumber(p.cost_bound->cost_seconds) : "", ",", line, "\n");
    }
  }
  return out;
}

}  // namespace kvlearn
