// Renders a cluster comparison (one ClusterResult per router x retention
// policy on the same trace, cluster and cost model) as a table, JSON or CSV.
// The JSON keeps `kvlearn compare`'s schema (docs/results.md, "Reading the table") and
// adds "router" and the cluster fields to each result (docs/cluster.md, "Cluster
// simulation").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/cluster_simulator.h"

namespace kvlearn {

struct ClusterComparison {
  std::string trace;
  uint64_t requests = 0;        // evaluated requests
  uint64_t block_accesses = 0;  // evaluated block accesses
  uint64_t pool_bytes = 0;
  uint32_t prefill_nodes = 0;
  uint32_t decode_nodes = 0;
  uint64_t hbm_bytes_per_node = 0;
  uint64_t dram_bytes_per_node = 0;
  std::string cost_model;           // "flops" or "kvlearn-paper"
  bool prefill_nodes_auto = false;  // sized by --prefill-nodes auto
  double transfer_weight = 1;       // w in cost_seconds
  std::vector<ClusterResult> results;
};

// Whether any row's utilization reaches kSaturatedUtilization.
bool AnyClusterSaturated(const ClusterComparison& comparison);
// "router/policy (96%), ..." for those rows; empty if none.
std::string SaturatedRows(const ClusterComparison& comparison);

// Whether the warm-up left each node more work (backlog_at_eval_ms) than the
// evaluated window gives it idle time (window * (1 - utilization)): the
// nodes never catch up inside the window, so its TTFT is mostly the
// warm-up's queue. The recompute bound is left out, as for saturation.
bool CarriesBacklog(const ClusterResult& row);
// "router/policy (N s per node), ..." for the rows that carry one; empty if none.
std::string BackloggedRows(const ClusterComparison& comparison);
// "backlog: <rows>: the warm-up left ...": what the table's note and kvlearn
// compare's stderr say of those rows.
std::string BackloggedLine(const std::string& rows);

std::string FormatClusterTable(const ClusterComparison& comparison);
std::string FormatClusterJson(const ClusterComparison& comparison);
std::string FormatClusterCsv(const ClusterComparison& comparison);
// {"trace": ..., "samples": [{"router", "policy", "ttft_ms": [...]}]}: every
// evaluated request's TTFT, in trace order (scripts/plot_ttft.py reads it).
std::string FormatTtftSamplesJson(const ClusterComparison& comparison);

}  // namespace kvlearn
