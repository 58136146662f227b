#include "sim/comparison_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/json_text.h"
#include "sim/report_fields.h"

namespace kvlearn {
namespace {

const ReplayResult* FindRow(const Comparison& c, std::string_view policy) {
  for (const auto& r : c.results) {
    if (r.policy == policy) return &r;
  }
  return nullptr;
}

// The fields of one row, in output order: JSON keys and CSV columns.
ReportFields Fields(const ReplayResult& r, double w) {
  ReportFields fields = {{"policy", JsonString(r.policy)}};
  AppendCountFields(r, fields);
  AppendCostFields(r, w, fields);
  AppendFollowerFields(r, fields);
  return fields;
}

std::string Percent(const std::optional<double>& v) {
  return v ? absl::StrFormat("%.1f%%", 100 * *v) : "-";
}

}  // namespace

bool AnySaturated(const std::vector<ReplayResult>& results) {
  return std::any_of(results.begin(), results.end(),
                     [](const ReplayResult& r) { return CountsForSaturation(r); });
}

std::string SaturatedRows(const std::vector<ReplayResult>& results) {
  std::string out;
  for (const ReplayResult& r : results) {
    if (!CountsForSaturation(r)) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ",
                    absl::StrFormat("%s (%.0f%%)", r.policy, 100 * r.utilization()));
  }
  return out;
}

void FillGapClosed(Comparison& comparison) {
  const ReplayResult* lru = FindRow(comparison, "lru");
  const ReplayResult* oracle = FindRow(comparison, "belady");
  for (auto& r : comparison.results) {
    r.gap_closed = lru && oracle ? GapClosed(r, *lru, *oracle) : std::nullopt;
    r.cost_gap_closed =
        lru && oracle ? CostGapClosed(r, *lru, *oracle, comparison.transfer_weight) : std::nullopt;
  }
}

std::string FormatJson(const Comparison& c) {
  std::string out = absl::StrCat(
      "{\"trace\": ", JsonString(c.trace), ", \"requests\": ", c.requests,
      ", \"block_accesses\": ", c.block_accesses, ", \"pool_bytes\": ", c.pool_bytes,
      ", \"cost_model\": ", JsonString(c.cost_model), ", \"prefill_nodes\": ", c.prefill_nodes,
      ", \"prefill_nodes_auto\": ", c.prefill_nodes_auto ? "true" : "false",
      ", \"transfer_weight\": ", JsonNumber(c.transfer_weight),
      ", \"saturated\": ", AnySaturated(c.results) ? "true" : "false", ", \"results\": [");
  for (size_t i = 0; i < c.results.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "{");
    const auto fields = Fields(c.results[i], c.transfer_weight);
    for (size_t k = 0; k < fields.size(); ++k) {
      absl::StrAppend(&out, k ? ", " : "", "\"", fields[k].first, "\": ", fields[k].second);
    }
    absl::StrAppend(&out, "}");
  }
  return out + "]}\n";
}

std::string FormatCsv(const Comparison& c) {
  std::string out;
  for (size_t i = 0; i < c.results.size(); ++i) {
    const auto fields = Fields(c.results[i], c.transfer_weight);
    if (i == 0) {
      for (size_t k = 0; k < fields.size(); ++k) {
        absl::StrAppend(&out, k ? "," : "", fields[k].first);
      }
      out += "\n";
    }
    for (size_t k = 0; k < fields.size(); ++k) {
      std::string v = fields[k].second;
      if (v == "null") v.clear();
      if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
      absl::StrAppend(&out, k ? "," : "", v);
    }
    out += "\n";
  }
  return out;
}

std::string FormatTable(const Comparison& c) {
  // The first column is as wide as the longest policy name.
  size_t width = 10;
  for (const ReplayResult& r : c.results) width = std::max(width, r.policy.size());
  const auto name = [width](std::string_view n) { return PaddedTo(n, width); };
  std::string out = absl::StrFormat(
      "trace %s: %d requests, %d block accesses evaluated; pool %.1f GB; cost model %s; "
      "%d prefill instances%s; cost = prefill GPU-s + %g x transfer s\n\n",
      c.trace, c.requests, c.block_accesses, Gb(c.pool_bytes), c.cost_model, c.prefill_nodes,
      c.prefill_nodes_auto ? " (auto)" : "", c.transfer_weight);
  static constexpr char kHeader[] = "%s %7s %10s %9s %9s %9s %9s %5s %9s %9s %7s %7s %7s\n";
  absl::StrAppend(
      &out,
      absl::StrFormat(kHeader, name("policy"), "blk hit", "transfer", "recompute", "prefill",
                      "transfer", "cost", "util", "TTFT", "TTFT", "replay", "gap", "cost gap"),
      absl::StrFormat(kHeader, name(""), "%", "GB", "Mtokens", "GPU-s", "s", "s", "%", "mean ms",
                      "p95 ms", "Macc/s", "closed", "closed"));
  for (const ReplayResult& r : c.results) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%s %7.2f %10.1f %9.2f %9.1f %9.1f %9.1f %5.0f %9.1f %9.1f %7.2f %7s %7s\n",
                        name(r.policy), 100 * r.block_hit_ratio(), Gb(r.transfer_bytes()),
                        r.recomputed_tokens / 1e6, r.prefill_gpu_seconds, r.transfer_seconds,
                        r.cost_seconds(c.transfer_weight), 100 * r.utilization(), r.ttft_ms.mean,
                        r.ttft_ms.p95, r.accesses_per_second() / 1e6, Percent(r.gap_closed),
                        Percent(r.cost_gap_closed)));
  }
  for (const ReplayResult& r : c.results) {
    if (!r.follower || r.follower->main_leader.empty()) continue;
    absl::StrAppend(&out, absl::StrFormat("\n%s: %d leader switches in the replay; %s led %.0f%% "
                                          "of the evaluated requests\n",
                                          r.policy, r.follower->switches, r.follower->main_leader,
                                          100 * r.follower->main_leader_share));
  }
  absl::StrAppend(&out, SaturatedNote(SaturatedRows(c.results)));
  return out;
}

}  // namespace kvlearn
