#include "sim/cluster_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/json_text.h"
#include "sim/report_fields.h"

namespace kvlearn {
namespace {

double Ratio(uint64_t part, uint64_t whole) {
  return whole ? static_cast<double>(part) / whole : 0;
}

// The fields of one row, in output order: JSON keys and CSV columns.
ReportFields Fields(const ClusterResult& c, double w) {
  const ReplayResult& r = c.replay;
  ReportFields fields = {{"router", JsonString(c.router)}, {"policy", JsonString(r.policy)}};
  AppendCountFields(r, fields);
  fields.insert(
      fields.end(),
      {
          {"queue_mean_ms", JsonNumber(c.queue_ms.mean)},
          {"queue_p95_ms", JsonNumber(c.queue_ms.p95)},
          {"routed_to_busier_ratio", JsonNumber(Ratio(c.routed_to_busier, r.requests))},
          {"routed_excess_mean",
           JsonNumber(r.requests ? static_cast<double>(c.routed_excess_requests) / r.requests : 0)},
          {"backlog_at_eval_requests", absl::StrCat(c.backlog_at_eval_requests)},
          {"backlog_at_eval_ms", JsonNumber(c.backlog_at_eval_ms)},
          {"load_mean_ms", JsonNumber(c.load_ms.mean)},
          {"prefill_mean_ms", JsonNumber(c.prefill_ms.mean)},
          {"hbm_hit_ratio", JsonNumber(c.hbm_hit_ratio())},
          {"dram_hit_ratio", JsonNumber(Ratio(c.dram_hit_blocks, r.block_accesses))},
          {"pool_hit_ratio", JsonNumber(Ratio(c.pool_hit_blocks, r.block_accesses))},
          {"replication_bytes", absl::StrCat(c.replication_bytes)},
          {"replications", absl::StrCat(c.replications)},
          {"burst_triggers", absl::StrCat(c.burst_triggers)},
          {"dram_write_bytes", absl::StrCat(c.dram_write_bytes)},
          {"link_bytes", absl::StrCat(c.link_bytes)},
      });
  AppendCostFields(r, w, fields);
  AppendFollowerFields(r, fields);  // null: the cluster runs a policy per tier and node
  return fields;
}

}  // namespace

bool AnyClusterSaturated(const ClusterComparison& c) {
  for (const ClusterResult& r : c.results) {
    if (CountsForSaturation(r.replay)) return true;
  }
  return false;
}

std::string SaturatedRows(const ClusterComparison& c) {
  std::string out;
  for (const ClusterResult& r : c.results) {
    if (!CountsForSaturation(r.replay)) continue;
    absl::StrAppend(
        &out, out.empty() ? "" : ", ",
        absl::StrFormat("%s/%s (%.0f%%)", r.router, r.replay.policy, 100 * r.replay.utilization()));
  }
  return out;
}

bool CarriesBacklog(const ClusterResult& row) {
  const ReplayResult& r = row.replay;
  const double idle_ms = 1000 * r.window_seconds() * std::max(0.0, 1 - r.utilization());
  return !IsRecomputeBound(r.policy) && row.backlog_at_eval_ms > idle_ms;
}

std::string BackloggedRows(const ClusterComparison& c) {
  std::string out;
  for (const ClusterResult& r : c.results) {
    if (!CarriesBacklog(r)) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ",
                    absl::StrFormat("%s/%s (%.0f s per node)", r.router, r.replay.policy,
                                    r.backlog_at_eval_ms / 1000));
  }
  return out;
}

std::string BackloggedLine(const std::string& rows) {
  return absl::StrCat("backlog: ", rows,
                      ": the warm-up left more work than the window's idle time, so these "
                      "rows' TTFT is mostly the warm-up's queue");
}

std::string FormatClusterJson(const ClusterComparison& c) {
  std::string out = absl::StrCat(
      "{\"trace\": ", JsonString(c.trace), ", \"requests\": ", c.requests,
      ", \"block_accesses\": ", c.block_accesses, ", \"pool_bytes\": ", c.pool_bytes,
      ", \"prefill_nodes\": ", c.prefill_nodes, ", \"decode_nodes\": ", c.decode_nodes,
      ", \"hbm_bytes_per_node\": ", c.hbm_bytes_per_node,
      ", \"dram_bytes_per_node\": ", c.dram_bytes_per_node,
      ", \"cost_model\": ", JsonString(c.cost_model),
      ", \"prefill_nodes_auto\": ", c.prefill_nodes_auto ? "true" : "false",
      ", \"transfer_weight\": ", JsonNumber(c.transfer_weight),
      ", \"saturated\": ", AnyClusterSaturated(c) ? "true" : "false", ", \"results\": [");
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

std::string FormatClusterCsv(const ClusterComparison& c) {
  std::string out;
  for (size_t i = 0; i < c.results.size(); ++i) {
    const auto fields = Fields(c.results[i], c.transfer_weight);
    if (i == 0) {
      for (size_t k = 0; k < fields.size(); ++k)
        absl::StrAppend(&out, k ? "," : "", fields[k].first);
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

std::string FormatClusterTable(const ClusterComparison& c) {
  std::string out = absl::StrFormat(
      "trace %s: %d requests, %d block accesses evaluated; %d prefill nodes%s (HBM %.1f GB, "
      "DRAM %.1f GB each), pool %.1f GB; cost model %s; cost = prefill GPU-s + %g x transfer "
      "s\n\n",
      c.trace, c.requests, c.block_accesses, c.prefill_nodes, c.prefill_nodes_auto ? " (auto)" : "",
      Gb(c.hbm_bytes_per_node), Gb(c.dram_bytes_per_node), Gb(c.pool_bytes), c.cost_model,
      c.transfer_weight);
  // The first two columns are as wide as the longest router and policy names.
  size_t router_width = 22, policy_width = 8;
  for (const ClusterResult& r : c.results) {
    router_width = std::max(router_width, r.router.size());
    policy_width = std::max(policy_width, r.replay.policy.size());
  }
  const auto names = [&](std::string_view router, std::string_view policy) {
    return absl::StrCat(PaddedTo(router, router_width), " ", PaddedTo(policy, policy_width));
  };
  static constexpr char kHeader[] = "%s %9s %9s %9s %9s %9s %9s %7s %7s %9s %9s %5s\n";
  absl::StrAppend(
      &out,
      absl::StrFormat(kHeader, names("router", "policy"), "TTFT", "TTFT", "TTFT", "queue", "load",
                      "prefill", "HBM hit", "blk hit", "repl", "cost", "util"),
      absl::StrFormat(kHeader, names("", ""), "mean ms", "p95 ms", "p99 ms", "mean ms", "mean ms",
                      "mean ms", "%", "%", "GB", "s", "%"));
  for (const ClusterResult& r : c.results) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %7.2f %9.2f %9.1f %5.0f\n",
                        names(r.router, r.replay.policy), r.replay.ttft_ms.mean,
                        r.replay.ttft_ms.p95, r.replay.ttft_ms.p99, r.queue_ms.mean, r.load_ms.mean,
                        r.prefill_ms.mean, 100 * r.hbm_hit_ratio(),
                        100 * r.replay.block_hit_ratio(), Gb(r.replication_bytes),
                        r.replay.cost_seconds(c.transfer_weight), 100 * r.replay.utilization()));
  }
  absl::StrAppend(&out, SaturatedNote(SaturatedRows(c)));
  if (const std::string rows = BackloggedRows(c); !rows.empty()) {
    absl::StrAppend(&out, "\n", BackloggedLine(rows), "\n");
  }
  return out;
}

std::string FormatTtftSamplesJson(const ClusterComparison& c) {
  std::string out = absl::StrCat("{\"trace\": ", JsonString(c.trace), ", \"samples\": [");
  for (size_t i = 0; i < c.results.size(); ++i) {
    const ClusterResult& r = c.results[i];
    absl::StrAppend(&out, i ? ", " : "", "{\"router\": ", JsonString(r.router),
                    ", \"policy\": ", JsonString(r.replay.policy), ", \"ttft_ms\": [");
    for (size_t k = 0; k < r.ttft_samples_ms.size(); ++k) {
      absl::StrAppend(&out, k ? "," : "", absl::StrFormat("%.6g", r.ttft_samples_ms[k]));
    }
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace kvlearn
