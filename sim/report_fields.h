// What every report row says about a ReplayResult, shared by the pool
// comparison (comparison_report) and the cluster comparison (cluster_report)
// so the two keep the same keys, order and number format: the counts and
// latencies, then the cost columns, then what a follower of experts did; and
// the "saturated" note under a table.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "sim/json_text.h"
#include "sim/replay_result.h"

namespace kvlearn {

// (key, JSON value) in output order: JSON keys and CSV columns.
using ReportFields = std::vector<std::pair<std::string, std::string>>;

inline std::string OptionalJsonNumber(const std::optional<double>& v) {
  return v ? JsonNumber(*v) : "null";
}

// block_hit_ratio ... accesses_per_second, gap_closed.
inline void AppendCountFields(const ReplayResult& r, ReportFields& out) {
  out.insert(out.end(), {
                            {"block_hit_ratio", JsonNumber(r.block_hit_ratio())},
                            {"token_hit_ratio", JsonNumber(r.token_hit_ratio())},
                            {"loaded_bytes", absl::StrCat(r.loaded_bytes)},
                            {"admitted_bytes", absl::StrCat(r.admitted_bytes)},
                            {"transfer_bytes", absl::StrCat(r.transfer_bytes())},
                            {"recomputed_tokens", absl::StrCat(r.recomputed_tokens)},
                            {"prefill_gpu_seconds", JsonNumber(r.prefill_gpu_seconds)},
                            {"ttft_mean_ms", JsonNumber(r.ttft_ms.mean)},
                            {"ttft_p50_ms", JsonNumber(r.ttft_ms.p50)},
                            {"ttft_p95_ms", JsonNumber(r.ttft_ms.p95)},
                            {"ttft_p99_ms", JsonNumber(r.ttft_ms.p99)},
                            {"accesses_per_second", JsonNumber(r.accesses_per_second())},
                            {"gap_closed", OptionalJsonNumber(r.gap_closed)},
                        });
}

// transfer_seconds, cost_seconds (transfer weighted by `w`), cost_gap_closed,
// utilization, busy_seconds, window_seconds.
inline void AppendCostFields(const ReplayResult& r, double w, ReportFields& out) {
  out.insert(out.end(), {
                            {"transfer_seconds", JsonNumber(r.transfer_seconds)},
                            {"cost_seconds", JsonNumber(r.cost_seconds(w))},
                            {"cost_gap_closed", OptionalJsonNumber(r.cost_gap_closed)},
                            {"utilization", JsonNumber(r.utilization())},
                            {"busy_seconds", JsonNumber(r.busy_seconds)},
                            {"window_seconds", JsonNumber(r.window_seconds())},
                        });
}

// leader_switches, main_leader, main_leader_share: ReplayResult::follower,
// null for policies that follow no experts (all but `learned`).
inline void AppendFollowerFields(const ReplayResult& r, ReportFields& out) {
  const bool led = r.follower.has_value() && !r.follower->main_leader.empty();
  out.insert(out.end(),
             {{"leader_switches", r.follower ? absl::StrCat(r.follower->switches) : "null"},
              {"main_leader", led ? JsonString(r.follower->main_leader) : "null"},
              {"main_leader_share", led ? JsonNumber(r.follower->main_leader_share) : "null"}});
}

// `text` padded with spaces to `width` (a table's name column, as wide as
// its longest name).
inline std::string PaddedTo(std::string_view text, size_t width) {
  std::string padded(text);
  if (padded.size() < width) padded.resize(width, ' ');
  return padded;
}

// "saturated: lru (96%), ...: busy >= 95% of ...": what the table's note and
// kvlearn compare's stderr say of the saturated `rows` ("lru (96%), ...").
inline std::string SaturatedLine(absl::string_view rows) {
  return absl::StrCat("saturated: ", rows,
                      absl::StrFormat(": busy >= %.0f%% of the window, so TTFT grows with the "
                                      "trace's length",
                                      100 * kSaturatedUtilization));
}
// The note under a table, or nothing when no row is saturated.
inline std::string SaturatedNote(absl::string_view rows) {
  return rows.empty() ? "" : absl::StrCat("\n", SaturatedLine(rows), "\n");
}

}  // namespace kvlearn
