// `kvlearn compare --cluster`: replays one trace through the simulated
// cluster once per (router, retention policy) pair, in parallel, and prints
// one row per pair.
#include "cli/cluster_compare.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/flag_checks.h"
#include "cli/replay_input.h"
#include "datasets/mooncake_reader.h"
#include "models/learned_model.h"
#include "oneapi/tbb/parallel_for.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/cluster_report.h"
#include "sim/cluster_simulator.h"
#include "sim/replay_trace.h"
#include "sim/report_fields.h"
#include "sim/router.h"

namespace kvlearn {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "kvlearn compare: " << status.message() << "\n";
  return 1;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// One row to run: a router name as given ("burst-replicate:16" sets Y = 16
// for that row) and a retention policy.
struct Row {
  std::string label;
  std::string router;
  uint32_t prefix_blocks = 0;
  std::string policy;
};

absl::StatusOr<std::vector<Row>> Rows(const ClusterCompareFlags& c,
                                      const std::vector<std::string>& policies) {
  std::vector<Row> rows;
  for (absl::string_view spec : absl::StrSplit(c.routers, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    Row row;
    row.label = std::string(spec);
    row.router = parts[0];
    row.prefix_blocks = c.burst_prefix_blocks;
    if (auto s = ResolveRouterName(row.router); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--router: ", s.status().message()));
    }
    if (parts.size() > 2 ||
        (parts.size() == 2 &&
         (!absl::SimpleAtoi(parts[1], &row.prefix_blocks) || row.prefix_blocks == 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--router: '", std::string(spec), "': expected NAME or NAME:Y with Y >= 1 blocks"));
    }
    for (const auto& p : policies) {
      row.policy = p;
      rows.push_back(row);
    }
  }
  if (rows.empty()) return absl::InvalidArgumentError("--router: no router given");
  return rows;
}

}  // namespace

std::shared_ptr<ClusterCompareFlags> AddClusterCompareFlags(CLI::App* cmd) {
  auto f = std::make_shared<ClusterCompareFlags>();
  const std::string group = "Cluster simulation (--cluster; docs/cluster.md)";
  CLI::Option* cluster =
      cmd->add_flag("--cluster", f->enabled,
                    "simulate the prefill cluster (per-node HBM + DRAM caches, routers, links, "
                    "queues) and report TTFT per router and policy")
          ->group(group);
  cmd->add_option(
         "--router", f->routers,
         "cluster: comma-separated routers: round-robin, least-load, cache-aware (SGLang's "
         "rule over each node's HBM as it is), cache-aware-approx (the same rule over the "
         "prompts it routed, sgl-router's default), burst-replicate, learned (needs "
         "--model); burst-replicate:Y sets the burst key to Y blocks for that row")
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--decode-nodes", f->decode_nodes,
                  "cluster: decode nodes (counted only: the P->D transfer overlaps prefill)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20))
      ->group(group);
  cmd->add_option("--hbm-gb", f->hbm_gb,
                  "cluster: HBM for the KV prefix cache per prefill node, GB (default: the "
                  "hardware profile's)")
      ->check(FiniteRange(0, 1e6))
      ->group(group);
  cmd->add_option("--dram-gb", f->dram_gb,
                  "cluster: host DRAM for KV per prefill node, GB; 0 = no DRAM tier (default: "
                  "the hardware profile's)")
      ->check(FiniteRange(0, 1e6))
      ->group(group);
  cmd->add_option("--burst-arrivals", f->burst_arrivals,
                  "burst-replicate: X, arrivals of one prefix that make a burst")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20))
      ->group(group);
  cmd->add_option("--burst-window", f->burst_window_s,
                  "burst-replicate: Z, seconds within which the X arrivals must fall")
      ->capture_default_str()
      ->check(FiniteRange(0, 1e6))
      ->group(group);
  cmd->add_option("--burst-prefix-blocks", f->burst_prefix_blocks,
                  "burst-replicate: Y, blocks in the burst key (BTB published: 128 blocks of "
                  "512 tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24))
      ->group(group);
  cmd->add_option("--replicate-targets", f->replicate_targets,
                  "burst-replicate: M, least-loaded nodes a burst's prefix is copied to")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20))
      ->group(group);
  cmd->add_option("--cache-threshold", f->cache_threshold,
                  "cache-aware: minimum matched share of the prompt to follow the cache")
      ->capture_default_str()
      ->check(FiniteRange(0, 1))
      ->group(group);
  cmd->add_option("--balance-abs-threshold", f->balance_abs_threshold,
                  "cache-aware: load gap (requests) past which it balances")
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--balance-rel-threshold", f->balance_rel_threshold,
                  "cache-aware: load ratio past which it balances")
      ->capture_default_str()
      ->check(FiniteRange(0, 1e6))
      ->group(group);
  cmd->add_option("--router-tree-tokens", f->router_tree_tokens,
                  "cache-aware-approx: tokens of routed prompts the router remembers per node "
                  "(sgl-router's --max-tree-size, 2^26 characters, at ~4 characters per token)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50))
      ->group(group);
  cmd->add_option("--router-eviction-interval", f->router_eviction_interval_s,
                  "cache-aware-approx: seconds between trims of that memory (sgl-router's "
                  "--eviction-interval)")
      ->capture_default_str()
      ->check(FiniteRange(0.001, 1e9))
      ->group(group);
  cmd->add_option("--ttft-samples", f->ttft_samples,
                  "cluster: also write every evaluated request's TTFT per row to this JSON "
                  "file (for scripts/plot_ttft.py)")
      ->group(group);
  // A cluster flag without --cluster would be ignored by the pool replay:
  // refuse it at parse time ("--router requires --cluster").
  for (CLI::Option* o :
       cmd->get_options([&](CLI::Option* o) { return o != cluster && o->get_group() == group; })) {
    o->needs(cluster);
  }
  return f;
}

int RunClusterCompare(const ClusterCompareFlags& c, const SharedCompareFlags& s) {
  auto cost_or = s.cost.Resolve();
  if (!cost_or.ok()) return Fail(cost_or.status());
  const CostModel& cost = *cost_or;
  if (s.input.trace.empty()) return Fail(absl::InvalidArgumentError("--trace is required"));

  std::vector<std::string> policies = absl::StrSplit(s.policies, ',', absl::SkipEmpty());
  if (policies.empty()) policies = {"lru"};  // --policies not given: one retention policy
  for (const auto& p : policies) {
    if (auto st = CheckPolicyName(p); !st.ok()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--policies: ", st.message())));
    }
  }
  auto rows = Rows(c, policies);
  if (!rows.ok()) return Fail(rows.status());
  for (const Row& row : *rows) {
    if (row.router == "learned" && s.model.empty()) {  // before the trace is read
      return Fail(absl::InvalidArgumentError(
          "--router: 'learned' needs a trained model: add --model FILE (kvlearn train)"));
    }
  }

  // Before the trace is read, so a model that cannot serve is refused at once.
  auto read_options = s.input.Resolve();
  if (!read_options.ok()) return Fail(read_options.status());
  auto model = LoadModelForReplay(s.model, read_options->block_size, policies);
  if (!model.ok()) return Fail(model.status());

  Trace trace;
  auto replay = ReadTraceForReplay(s.input.trace, *read_options, cost, "compare", std::cerr, trace);
  if (!replay.ok()) return Fail(replay.status());
  if (auto st = CheckModelForTrace(model->get(), s.model, trace); !st.ok()) return Fail(st);

  ClusterOptions base;
  FillClusterCapacities(cost, base);
  if (c.hbm_gb >= 0) base.hbm_bytes_per_node = static_cast<uint64_t>(c.hbm_gb * 1e9);
  if (c.dram_gb >= 0) base.dram_bytes_per_node = static_cast<uint64_t>(c.dram_gb * 1e9);
  base.prefill_nodes = cost.hardware().prefill_nodes;
  base.decode_nodes = c.decode_nodes;
  base.pool_bytes = s.pool_bytes
                        ? s.pool_bytes
                        : static_cast<uint64_t>(s.pool_fraction * replay->distinct_block_bytes);
  base.eval_from = s.eval_from;
  base.cache_aware = {c.cache_threshold, c.balance_abs_threshold, c.balance_rel_threshold,
                      c.router_tree_tokens, c.router_eviction_interval_s};
  base.replication.rule.arrivals = c.burst_arrivals;
  base.replication.rule.window_ms = static_cast<int64_t>(c.burst_window_s * 1000);
  base.replication.targets = c.replicate_targets;
  base.keep_ttft_samples = !c.ttft_samples.empty();
  base.model = *model;

  const bool auto_nodes = s.cost.prefill_nodes == "auto";
  if (auto_nodes) {
    ClusterSizing sizing;
    auto nodes = SizeCluster(*replay, cost, base, kTargetUtilization, &sizing);
    if (!nodes.ok()) return Fail(nodes.status());
    base.prefill_nodes = *nodes;
    std::cerr << absl::StrFormat(
        "cluster: prefill nodes auto: %d (LRU, round-robin router: busy %.0f%% of the window; %d "
        "sizing replays)\n",
        *nodes, 100 * sizing.utilization, sizing.replays);
  }

  std::cerr << absl::StrFormat(
      "cluster: replaying %d requests (%d block accesses) on %d prefill nodes, %d rows\n",
      trace.requests.size(), replay->block_accesses(), base.prefill_nodes, rows->size());
  std::vector<absl::StatusOr<ClusterResult>> results(rows->size(), absl::UnknownError("not run"));
  tbb::parallel_for(size_t{0}, rows->size(), [&](size_t i) {
    const Row& row = (*rows)[i];
    ClusterOptions o = base;
    o.router = row.router;
    o.retention_policy = row.policy;
    o.replication.rule.prefix_blocks = row.prefix_blocks;
    results[i] = ReplayCluster(*replay, cost, o);
    if (results[i].ok()) results[i]->router = row.label;
  });

  ClusterComparison comparison;
  comparison.trace = s.input.trace;
  comparison.pool_bytes = base.pool_bytes;
  comparison.prefill_nodes = base.prefill_nodes;
  comparison.decode_nodes = base.decode_nodes;
  comparison.hbm_bytes_per_node = base.hbm_bytes_per_node;
  comparison.dram_bytes_per_node = base.dram_bytes_per_node;
  comparison.cost_model = std::string(RecomputeFormName(cost.form()));
  comparison.prefill_nodes_auto = auto_nodes;
  comparison.transfer_weight = s.transfer_weight;
  for (auto& r : results) {
    if (!r.ok()) return Fail(r.status());
    comparison.requests = r->replay.requests;
    comparison.block_accesses = r->replay.block_accesses;
    comparison.results.push_back(std::move(*r));
  }
  if (const std::string rows = SaturatedRows(comparison); !rows.empty()) {
    std::cerr << "kvlearn compare: " << SaturatedLine(rows) << "\n";
  }
  if (const std::string rows = BackloggedRows(comparison); !rows.empty()) {
    std::cerr << "kvlearn compare: " << BackloggedLine(rows) << "\n";
  }
  if (!c.ttft_samples.empty()) {
    if (auto st = WriteFile(c.ttft_samples, FormatTtftSamplesJson(comparison)); !st.ok()) {
      return Fail(st);
    }
    std::cerr << "wrote " << c.ttft_samples << "\n";
  }
  const std::string text = s.format == "json"  ? FormatClusterJson(comparison)
                           : s.format == "csv" ? FormatClusterCsv(comparison)
                                               : FormatClusterTable(comparison);
  if (s.out.empty()) {
    std::cout << text;
    return 0;
  }
  if (auto st = WriteFile(s.out, text); !st.ok()) return Fail(st);
  std::cerr << "wrote " << s.out << "\n";
  return 0;
}

}  // namespace kvlearn
