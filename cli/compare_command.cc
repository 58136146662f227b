// `kvlearn compare`: replays one trace under several retention policies, in
// parallel, on the same pool size and cost model, and prints the A/B table.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/cluster_compare.h"
#include "cli/command.h"
#include "cli/cost_flags.h"
#include "cli/flag_checks.h"
#include "cli/prefill_sizing.h"
#include "cli/replay_input.h"
#include "cli/trace_input_flags.h"
#include "cli/trace_traffic.h"
#include "core/cost_model.h"
#include "core/progress_line.h"
#include "datasets/mooncake_reader.h"
#include "models/learned_model.h"
#include "models/model_judgement.h"
#include "models/traffic_drift.h"
#include "oneapi/tbb/parallel_for.h"
#include "policies/policy_factory.h"
#include "policies/retention_policy.h"
#include "sim/block_trace_export.h"
#include "sim/comparison_report.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"
#include "sim/report_fields.h"

namespace kvlearn {
namespace {

struct CompareFlags {
  TraceInputFlags input;
  std::string policies;  // empty: every policy that can run (learned ones need --model)
  double pool_fraction = 0.1;
  uint64_t pool_bytes = 0;
  CostFlags cost;
  std::string model;  // learned model file
  double eval_from = 0;
  std::string format = "table";
  std::string out;
  bool print_config = false;
  bool quiet = false;
  std::string block_trace;  // --write-block-trace: write it and replay nothing
  double transfer_weight = 1;
};

// The recompute curve at a few prompt lengths, and each profile's place
// against the published prefill times (PublishedPrefills).
std::string CurveText(const CostModel& cost, uint32_t block_size) {
  std::string out = "prefill of an L-token prompt on one instance:\n";
  for (const uint64_t l : {512u, 4096u, 16384u, 65536u}) {
    absl::StrAppend(&out, absl::StrFormat("  L = %6d   %10.1f ms", l, cost.RecomputeMs(l)));
    if (cost.form() == RecomputeForm::kFlops) {
      absl::StrAppend(&out, absl::StrFormat("   (attention %4.1f%% of FLOPs)",
                                            100 * cost.AttentionFlops(l) / cost.PrefillFlops(l)));
    }
    out += "\n";
  }
  const double first = cost.RecomputeMs(0, block_size);
  const uint64_t deep = (15000 / block_size) * block_size;
  absl::StrAppend(
      &out, absl::StrFormat("block of %d tokens: first %.2f ms; at token %d %.2f ms (%.2fx)\n",
                            block_size, first, deep, cost.RecomputeMs(deep, deep + block_size),
                            cost.RecomputeMs(deep, deep + block_size) / first));
  return out;
}

std::string PublishedText() {
  std::string out =
      "flops form against published prefill times (docs/cost_model.md cites them):\n"
      "  source                             model          gpus    tokens  published ms  "
      "modelled ms  ratio\n";
  for (const PublishedPrefill& p : PublishedPrefills()) {
    const auto modelled = ModelledPrefillMs(p);
    if (!modelled.ok()) continue;
    absl::StrAppend(&out, absl::StrFormat("  %-34s %-14s %4d %9d %13.0f %12.0f %6.2f\n", p.source,
                                          p.model, p.gpus, p.tokens, p.published_ms, *modelled,
                                          *modelled / p.published_ms));
  }
  return out;
}

// `block_size`: the trace's, or Mooncake's when no trace is given.
std::string ConfigText(const CompareFlags& f, const CostModel& cost, uint32_t block_size) {
  const ModelProfile& m = cost.model();
  const HardwareProfile& h = cost.hardware();
  std::string out;
  absl::StrAppend(
      &out, absl::StrFormat("cost model          %s\n", RecomputeFormName(cost.form())),
      absl::StrFormat("model profile       %s: %d layers, %d query / %d kv heads, head dim %d, "
                      "%d-byte dtype, %.2fB params\n",
                      m.name, m.layers, m.query_heads, m.kv_heads, m.head_dim, m.dtype_bytes,
                      m.params_billions),
      absl::StrFormat("kv bytes per token  %d B\n", m.KvBytesPerToken()),
      absl::StrFormat("block size          %d tokens (%d B per full block)%s\n", block_size,
                      m.KvBytesPerToken() * block_size,
                      f.input.trace.empty() && f.input.block_size == 0
                          ? " (Mooncake's; a Bailian trace's are 16)"
                          : ""),
      absl::StrFormat("hardware profile    %s\n", h.name));
  if (cost.form() == RecomputeForm::kFlops) {
    absl::StrAppend(
        &out,
        absl::StrFormat("prefill instance    %d GPU(s) x %g TFLOP/s x MFU %g\n",
                        cost.GpusPerInstance(), h.peak_tflops, h.mfu),
        absl::StrFormat("dense FLOPs         2 x params x L = %.3g x L\n", cost.DenseFlops(1)),
        absl::StrFormat("attention FLOPs     2 x layers x d x L^2 = %.3g x L^2 (d = %d)\n",
                        cost.AttentionFlops(1), m.query_heads * m.head_dim),
        absl::StrFormat("dense = attention   at L = %.0f tokens\n",
                        cost.DenseFlops(1) / cost.AttentionFlops(1)),
        absl::StrFormat("transfer latency    %g ms per transfer\n", cost.TransferLatencyMs()),
        absl::StrFormat("KV HBM per instance %.1f GB (cluster: %d x %g GB x %.2f - weights)\n",
                        cost.KvHbmBytesPerInstance() / 1e9, cost.GpusPerInstance(),
                        h.hbm_gb_per_gpu, kServingMemoryFraction));
  } else {
    absl::StrAppend(
        &out,
        absl::StrFormat("alpha_bw            %g ms/token (prefixes under L_cross)\n",
                        h.alpha_bw_ms_per_token),
        absl::StrFormat("alpha_flop          %g ms/token^2 (prefixes from L_cross on)\n",
                        h.alpha_flop_ms_per_token2),
        absl::StrFormat("L_cross             %d tokens\n", h.l_cross_tokens),
        absl::StrFormat("recompute scale     %.3f (model params / %.2fB calibration params)\n",
                        m.params_billions / h.calibrated_params_billions,
                        h.calibrated_params_billions));
  }
  absl::StrAppend(
      &out, CurveText(cost, block_size),
      absl::StrFormat("RDMA                %g GB/s (pool <-> prefill node)\n", h.rdma_gb_per_s),
      absl::StrFormat("PCIe / NVMe / HBM   %g / %g / %g GB/s\n", h.pcie_gb_per_s, h.nvme_gb_per_s,
                      h.hbm_gb_per_s),
      f.cost.prefill_nodes == "auto"
          ? std::string("prefill nodes       auto (fewest at which LRU is busy <= 80% of the "
                        "evaluated window; round-robin, FIFO queue each)\n")
          : absl::StrFormat("prefill nodes       %d (round-robin, FIFO queue each)\n",
                            h.prefill_nodes),
      absl::StrFormat("cost_seconds        prefill GPU-s + %g x transfer s\n", f.transfer_weight),
      f.pool_bytes ? absl::StrFormat("pool                %d bytes\n", f.pool_bytes)
                   : absl::StrFormat("pool                %g of the trace's distinct-block bytes\n",
                                     f.pool_fraction),
      absl::StrFormat("eval from           %g (share of requests used only to warm the pool)\n",
                      f.eval_from),
      absl::StrFormat("policies            %s\n",
                      f.policies.empty() ? "all (learned ones with --model)" : f.policies),
      PublishedText());
  return out;
}

int Fail(const absl::Status& status) {
  std::cerr << "kvlearn compare: " << status.message() << "\n";
  return 1;
}

// To stderr: one line if the model is marked unfit, and the drift of the
// evaluated requests' traffic from the model's training traffic (with a
// warning when a quantity is off by more than kDriftFactor).
void ReportModelFit(const LearnedModel& model, const std::string& path, const Trace& trace,
                    double eval_from) {
  const ModelMetadata& meta = model.metadata();
  if (const std::string unfit = UnfitModelLine(meta, path); !unfit.empty()) {
    std::cerr << "kvlearn compare: " << unfit << "\n";
  }
  if (!meta.training_traffic.has_value()) {
    std::cerr << "kvlearn compare: " << path
              << " records no training traffic (written before kvlearn train recorded it): "
                 "no drift line\n";
    return;
  }
  const auto n = static_cast<uint32_t>(trace.requests.size());
  const TrafficDrift drift =
      CompareTraffic(SummarizeTraceTraffic(trace, static_cast<uint32_t>(eval_from * n), n),
                     *meta.training_traffic);
  std::cerr << "kvlearn compare: traffic drift, evaluated / model's training (ratio): "
            << DriftText(drift) << "\n";
  if (drift.any_off()) {
    std::cerr << "kvlearn compare: warning: the evaluated traffic is off the model's training "
                 "traffic by more than a factor "
              << kDriftFactor << " (" << OffText(drift)
              << "); the model learned other traffic: retrain it on this one (kvlearn train)\n";
  }
}

// --write-block-trace: the replay's block accesses for libCacheSim's cachesim.
int WriteBlockTrace(const ReplayTrace& replay, const std::string& path) {
  std::ofstream file(path, std::ios::binary);
  if (auto s = WriteOracleGeneral(replay, file); !s.ok()) return Fail(s);
  file.close();
  if (!file) return Fail(absl::UnavailableError(absl::StrCat("cannot write ", path)));
  std::cerr << absl::StrFormat(
      "wrote %s: %d block accesses, %d distinct blocks, %d distinct-block bytes "
      "(libCacheSim oracleGeneral)\n",
      path, replay.block_accesses(), replay.catalog.size(), replay.distinct_block_bytes);
  return 0;
}

int RunCompare(const CompareFlags& f) {
  auto cost = f.cost.Resolve();
  if (!cost.ok()) return Fail(cost.status());
  TraceReadOptions read_options;
  if (!f.input.trace.empty()) {
    auto resolved = f.input.Resolve();
    if (!resolved.ok()) return Fail(resolved.status());
    read_options = *resolved;
  }
  if (f.print_config) {
    const uint32_t block_size = read_options.block_size ? read_options.block_size
                                : f.input.block_size    ? f.input.block_size
                                                        : DefaultBlockSize(TraceFormat::kMooncake);
    std::cout << ConfigText(f, *cost, block_size);
    return 0;
  }
  if (f.input.trace.empty()) return Fail(absl::InvalidArgumentError("--trace is required"));

  std::vector<std::string> policies = absl::StrSplit(f.policies, ',', absl::SkipEmpty());
  if (f.policies.empty()) {
    for (const auto name : PolicyNames()) {
      if (!PolicyNeedsModel(name) || !f.model.empty()) policies.emplace_back(name);
    }
  }
  for (const auto& p : policies) {
    if (auto s = CheckPolicyName(p); !s.ok()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--policies: ", s.message())));
    }
  }

  // Before the trace is read: a model that cannot serve is refused at once,
  // not after minutes of reading.
  auto model = LoadModelForReplay(f.model, read_options.block_size, policies);
  if (!model.ok()) return Fail(model.status());

  Trace trace;
  auto replay = ReadTraceForReplay(f.input.trace, read_options, *cost, "compare", std::cerr, trace);
  if (!replay.ok()) return Fail(replay.status());
  if (auto s = CheckModelForTrace(model->get(), f.model, trace); !s.ok()) return Fail(s);
  if (!f.block_trace.empty()) return WriteBlockTrace(*replay, f.block_trace);

  PoolReplayOptions options;
  options.pool_bytes = f.pool_bytes
                           ? f.pool_bytes
                           : static_cast<uint64_t>(f.pool_fraction * replay->distinct_block_bytes);
  options.eval_from = f.eval_from;
  options.model = *model;
  if (*model != nullptr) ReportModelFit(**model, f.model, trace, f.eval_from);

  const bool auto_nodes = f.cost.prefill_nodes == "auto";
  auto sized_or = SizePrefillNodes(*replay, *cost, options, auto_nodes, std::cerr);
  if (!sized_or.ok()) return Fail(sized_or.status());
  const CostModel& sized = *sized_or;

  std::cerr << absl::StrFormat(
      "replaying %d requests (%d block accesses) under %d policies on %d prefill instances\n",
      trace.requests.size(), replay->block_accesses(), policies.size(),
      sized.hardware().prefill_nodes);
  std::vector<absl::StatusOr<ReplayResult>> results(policies.size(), absl::UnknownError("not run"));
  ProgressLine progress("kvlearn compare: replayed",
                        uint64_t{trace.requests.size()} * policies.size(), "requests",
                        ProgressLine::Wanted(STDERR_FILENO, f.quiet), std::cerr);
  options.requests_done = &progress.counter();
  progress.Start();
  tbb::parallel_for(size_t{0}, policies.size(), [&](size_t i) {
    results[i] = ReplayPool(*replay, sized, policies[i], options);
  });
  progress.Finish();

  Comparison comparison;
  comparison.trace = f.input.trace;
  comparison.pool_bytes = options.pool_bytes;
  comparison.cost_model = std::string(RecomputeFormName(sized.form()));
  comparison.prefill_nodes = sized.hardware().prefill_nodes;
  comparison.prefill_nodes_auto = auto_nodes;
  comparison.transfer_weight = f.transfer_weight;
  for (auto& r : results) {
    if (!r.ok()) return Fail(r.status());
    comparison.requests = r->requests;
    comparison.block_accesses = r->block_accesses;
    comparison.results.push_back(std::move(*r));
  }
  FillGapClosed(comparison);
  if (const std::string rows = SaturatedRows(comparison.results); !rows.empty()) {
    std::cerr << "kvlearn compare: " << SaturatedLine(rows) << "\n";
  }

  std::string text = f.format == "json"  ? FormatJson(comparison)
                     : f.format == "csv" ? FormatCsv(comparison)
                                         : FormatTable(comparison);
  if (f.out.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream file(f.out, std::ios::binary);
  file << text;
  file.close();
  if (!file) return Fail(absl::UnavailableError(absl::StrCat("cannot write ", f.out)));
  std::cerr << "wrote " << f.out << "\n";
  return 0;
}

}  // namespace

Command AddCompareCommand(CLI::App& root) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* cmd = root.add_subcommand(
      "compare",
      "Replay a trace under several retention policies on the same pool and cost model and "
      "print the A/B table (columns explained in docs/results.md, 'Reading the table'). Under "
      "the table, a line for 'learned' gives its leader switches over the whole replay and the "
      "expert (lru, gdsf, learned-model) that led the largest share of the evaluated requests "
      "(JSON/CSV: leader_switches, main_leader, main_leader_share; null for other policies).");
  flags->input.Register(cmd, "trace to replay (Mooncake or Bailian JSONL)");
  cmd->add_option("--policies", flags->policies,
                  absl::StrCat("comma-separated policies, from: ", JoinedPolicyNames(","),
                               " (default: all; those needing a model only with --model)"))
      ->capture_default_str();
  auto* fraction = cmd->add_option("--pool-fraction", flags->pool_fraction,
                                   "pool capacity as a share of the trace's distinct-block bytes")
                       ->capture_default_str()
                       ->check(FiniteRange(0, 1e6));
  cmd->add_option("--pool-bytes", flags->pool_bytes, "pool capacity in bytes")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX))
      ->excludes(fraction);
  flags->cost.Register(cmd);
  cmd->add_option("--model", flags->model,
                  "learned model file from `kvlearn train`: needed by 'learned-model'; 'learned' "
                  "follows lru and gdsf without one, and the model too with one");
  cmd->add_flag("--quiet", flags->quiet,
                "no progress line (drawn on stderr only when it is a terminal: requests replayed "
                "over all policies, rate, ETA)");
  cmd->add_option("--eval-from", flags->eval_from,
                  "share of requests used only to warm the pool; metrics cover the rest")
      ->capture_default_str()
      ->check(FiniteRange(0, 0.999999));
  cmd->add_option("--format", flags->format, "output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--out", flags->out, "write the output to this file instead of stdout");
  cmd->add_option("--transfer-weight", flags->transfer_weight,
                  "w in cost_seconds = prefill GPU-seconds + w * transfer seconds")
      ->capture_default_str()
      ->check(FiniteRange(0, 1e9));
  cmd->add_flag("--print-config", flags->print_config,
                "print the resolved cost model (with its recompute curve and where it stands "
                "against published prefill times) and pool settings, then exit");
  cmd->add_option("--write-block-trace", flags->block_trace,
                  "write the trace's block accesses (one per block of each request, root "
                  "first; size = the block's KV bytes) to this file in libCacheSim's "
                  "oracleGeneral binary format, for its cachesim (scripts/compare_cachesim.sh), "
                  "then exit without replaying");
  auto cluster = AddClusterCompareFlags(cmd);  // --cluster: cli/cluster_compare.cc
  return {cmd, [flags, cluster] {
            const CompareFlags& f = *flags;
            return cluster->enabled
                       ? RunClusterCompare(
                             *cluster, {f.input, f.policies, f.pool_fraction, f.pool_bytes, f.cost,
                                        f.model, f.eval_from, f.format, f.out, f.transfer_weight})
                       : RunCompare(f);
          }};
}

}  // namespace kvlearn
