// `kvlearn plan`: how big must the pool be, and what does each policy save at
// each size? Reads a trace once, replays every policy at a sweep of pool sizes
// (sim/pool_sweep.h) and answers in cost (sim/plan_answers.h).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/cost_flags.h"
#include "cli/flag_checks.h"
#include "cli/output_path.h"
#include "cli/prefill_sizing.h"
#include "cli/replay_input.h"
#include "cli/trace_input_flags.h"
#include "core/progress_line.h"
#include "models/learned_model.h"
#include "models/model_judgement.h"
#include "policies/policy_factory.h"
#include "sim/plan_answers.h"
#include "sim/plan_report.h"
#include "sim/pool_sweep.h"
#include "sim/replay_trace.h"
#include "sim/sampled_sweep.h"
#include "sim/trace_sample.h"

namespace kvlearn {
namespace {

// The two rows every plan needs: its reference and its no-pool baseline.
constexpr std::string_view kAlwaysRun[] = {"lru", "no-cache"};

struct PlanFlags {
  TraceInputFlags input;
  std::string policies;  // empty: every policy that can run (learned-model needs --model)
  std::string model;
  uint32_t sizes = 16;
  double min_fraction = 0.01;
  double max_fraction = 1.0;
  double pool_fraction = 0.1;
  double target = 0.9;
  double gpu_hour_price = -1;  // negative: not given
  CostFlags cost;
  double eval_from = 0;
  double transfer_weight = 1;
  std::string format = "table";
  std::string out_dir;
  bool quiet = false;
  double sample = 0;  // 0: replay the whole trace
  uint64_t sample_salt = 0;
};

int Fail(const absl::Status& status) {
  std::cerr << "kvlearn plan: " << status.message() << "\n";
  return 1;
}

// --policies, or every policy that can run; with lru and no-cache added when
// missing.
absl::StatusOr<std::vector<std::string>> PolicyList(const PlanFlags& f) {
  std::vector<std::string> policies = absl::StrSplit(f.policies, ',', absl::SkipEmpty());
  if (f.policies.empty()) {
    for (const auto name : PolicyNames()) {
      if (!PolicyNeedsModel(name) || !f.model.empty()) policies.emplace_back(name);
    }
  }
  for (const std::string& p : policies) {
    if (auto s = CheckPolicyName(p); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--policies: ", s.message()));
    }
    if (PolicyNeedsModel(p) && f.model.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policies: '", p, "' needs a trained model: add --model FILE"));
    }
  }
  for (const std::string_view needed : kAlwaysRun) {
    if (std::find(policies.begin(), policies.end(), needed) == policies.end()) {
      policies.emplace_back(needed);
    }
  }
  return policies;
}

absl::Status CheckSweepFlags(const PlanFlags& f) {
  if (f.min_fraction > f.max_fraction) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--min-fraction %g is above --max-fraction %g", f.min_fraction, f.max_fraction));
  }
  if (f.pool_fraction < f.min_fraction || f.pool_fraction > f.max_fraction) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--pool-fraction %g is outside the sweep [%g, %g]: move it in, or widen "
                        "--min-fraction / --max-fraction",
                        f.pool_fraction, f.min_fraction, f.max_fraction));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", path.string()));
  std::cerr << "wrote " << path.string() << "\n";
  return absl::OkStatus();
}

// Creates --out-dir if needed and checks both files can be written there,
// before any replay.
absl::Status PrepareOutDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out-dir ", dir, ": cannot create it: ", ec.message()));
  }
  for (const char* name : {"plan.json", "plan.csv"}) {
    if (auto s = CheckOutputWritable("--out-dir", (std::filesystem::path(dir) / name).string());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Reads the trace at `path` and keeps its sample in `trace`, the full trace
// freed once its scale is known; `eval_from` becomes the sample's.
absl::StatusOr<SampleScale> ReadSampledTrace(const PlanFlags& f, const TraceReadOptions& read,
                                             const CostModel& cost, Trace& trace,
                                             PlanSample& described, double& eval_from) {
  auto full = ReadTrace(f.input.trace, read);
  if (!full.ok()) return full.status();
  // Counting every block's readers takes seconds on a trace of 100 M accesses.
  std::cerr << absl::StrFormat("kvlearn plan: read %d requests (%d block accesses); sampling\n",
                               full->requests.size(), full->hash_ids.size());
  TraceSample sample = SampleTrace(*full, {.rate = f.sample, .salt = f.sample_salt});
  if (sample.trace.requests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--sample %g kept none of the trace's %d requests: raise it", f.sample,
                        full->requests.size()));
  }
  const SampleScale scale = ScaleOfSample(*full, sample, cost, f.eval_from);
  eval_from = SampleEvalFrom(sample, f.eval_from);
  const TraceRequest& first_kept = sample.trace.requests[sample.warmup_requests];
  described = {f.sample,
               sample.trace.requests.size() - sample.warmup_requests,
               sample.trace.hash_ids.size() - first_kept.first_block,
               sample.warmup_requests,
               sample.shared_blocks,
               sample.shared_threshold,
               scale.byte_rate,
               scale.cost_rate};
  std::cerr << absl::StrFormat(
      "kvlearn plan: sampled %d of %d requests (%d of %d block accesses) at rate %g, after %d "
      "warm-up requests\n",
      described.kept_requests, sample.full_requests, described.kept_block_accesses,
      sample.full_block_accesses, f.sample, sample.warmup_requests);
  trace = std::move(sample.trace);
  return scale;
}

int RunPlan(const PlanFlags& f) {
  auto cost = f.cost.Resolve();
  if (!cost.ok()) return Fail(cost.status());
  if (f.input.trace.empty()) return Fail(absl::InvalidArgumentError("--trace is required"));
  if (auto s = CheckSweepFlags(f); !s.ok()) return Fail(s);
  auto policies = PolicyList(f);
  if (!policies.ok()) return Fail(policies.status());
  if (!f.out_dir.empty()) {
    if (auto s = PrepareOutDir(f.out_dir); !s.ok()) return Fail(s);
  }

  // The model before the trace: one of other blocks is refused at once.
  auto read_options = f.input.Resolve();
  if (!read_options.ok()) return Fail(read_options.status());
  auto model = LoadModelForReplay(f.model, read_options->block_size, *policies);
  if (!model.ok()) return Fail(model.status());
  PoolReplayOptions options;
  options.eval_from = f.eval_from;
  options.model = *model;
  if (*model != nullptr) {
    if (const std::string unfit = UnfitModelLine((*model)->metadata(), f.model); !unfit.empty()) {
      std::cerr << "kvlearn plan: " << unfit << "\n";
    }
  }

  // The trace replayed: the file's, or with --sample its sample.
  Trace trace;
  std::optional<SampleScale> scale;
  PlanSample sample_described;
  absl::StatusOr<ReplayTrace> replay = absl::UnknownError("not read");
  if (f.sample > 0) {
    auto sampled =
        ReadSampledTrace(f, *read_options, *cost, trace, sample_described, options.eval_from);
    if (!sampled.ok()) return Fail(sampled.status());
    scale = *sampled;
    replay = PrepareTraceForReplay(f.input.trace, *read_options, *cost, "plan", std::cerr, trace);
  } else {
    replay = ReadTraceForReplay(f.input.trace, *read_options, *cost, "plan", std::cerr, trace);
  }
  if (!replay.ok()) return Fail(replay.status());
  if (auto s = CheckModelForTrace(model->get(), f.model, trace); !s.ok()) return Fail(s);

  // Prefill instances are sized once, at the user's pool as `compare` sizes
  // them there, and kept at every size: cost does not depend on the count,
  // and TTFT then compares sizes on one cluster.
  const bool auto_nodes = f.cost.prefill_nodes == "auto";
  options.pool_bytes =
      scale ? scale->SampledPoolBytes(PoolBytesAt(f.pool_fraction, scale->full_distinct_bytes))
            : PoolBytesAt(f.pool_fraction, replay->distinct_block_bytes);
  auto sized = SizePrefillNodes(*replay, *cost, options, auto_nodes, std::cerr);
  if (!sized.ok()) return Fail(sized.status());

  const std::vector<double> fractions =
      WithFraction(LogSpacedFractions(f.min_fraction, f.max_fraction, f.sizes), f.pool_fraction);
  std::cerr << absl::StrFormat(
      "replaying %d requests (%d block accesses) under %d policies at %d pool sizes on %d "
      "prefill instances\n",
      trace.requests.size(), replay->block_accesses(), policies->size(), fractions.size(),
      sized->hardware().prefill_nodes);
  ProgressLine progress("kvlearn plan: replayed",
                        uint64_t{trace.requests.size()} * policies->size() * fractions.size(),
                        "requests", ProgressLine::Wanted(STDERR_FILENO, f.quiet), std::cerr);
  options.requests_done = &progress.counter();
  progress.Start();
  auto sweep =
      scale ? RunPoolSweepAt(*replay, *sized, *policies, SampledPools(*scale, fractions), options)
            : RunPoolSweep(*replay, *sized, *policies, fractions, options);
  progress.Finish();
  if (!sweep.ok()) return Fail(sweep.status());
  AddCostLowerBounds(*replay, *sized, options.eval_from, f.transfer_weight, *sweep);
  if (scale) ScaleSweepToFull(*scale, *sweep);

  Plan plan;
  plan.header.trace = f.input.trace;
  plan.header.requests = sweep->points.front().results.front().requests;
  plan.header.block_accesses = sweep->points.front().results.front().block_accesses;
  plan.header.cost_model = std::string(RecomputeFormName(sized->form()));
  plan.header.prefill_nodes = sized->hardware().prefill_nodes;
  plan.header.prefill_nodes_auto = auto_nodes;
  plan.header.transfer_weight = f.transfer_weight;
  plan.distinct_block_bytes = replay->distinct_block_bytes;
  if (scale) {
    // The full trace's, exactly: the sample's rows are estimates of it.
    plan.header.requests = scale->full_requests;
    plan.header.block_accesses = scale->full_block_accesses;
    plan.distinct_block_bytes = scale->full_distinct_bytes;
    plan.sample = sample_described;
  }
  plan.prefill_nodes_sized_at = f.pool_fraction;
  plan.pool_fraction = f.pool_fraction;
  plan.target = f.target;
  if (f.gpu_hour_price >= 0) plan.gpu_hour_price = f.gpu_hour_price;
  auto answers =
      AnswerPlan(*sweep, f.transfer_weight, f.pool_fraction, f.target, plan.gpu_hour_price);
  if (!answers.ok()) return Fail(answers.status());
  plan.sweep = std::move(*sweep);
  plan.answers = std::move(*answers);

  std::cout << (f.format == "json"  ? FormatPlanJson(plan)
                : f.format == "csv" ? FormatPlanCsv(plan)
                                    : FormatPlanTable(plan));
  if (!f.out_dir.empty()) {
    const std::filesystem::path dir(f.out_dir);
    if (auto s = WriteFile(dir / "plan.json", FormatPlanJson(plan)); !s.ok()) return Fail(s);
    if (auto s = WriteFile(dir / "plan.csv", FormatPlanCsv(plan)); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = root.add_subcommand(
      "plan",
      "How big must the pool be, and what does each policy save at each size? Reads the trace "
      "once and replays every policy (as `compare` does, in parallel) at a sweep of pool sizes, "
      "log-spaced over shares of the trace's distinct-block bytes. Prints cost s (prefill GPU-s "
      "+ w x transfer s over the evaluated requests, lower is better) per policy and pool: "
      "'pool %' is the share of the distinct-block bytes, 'pool GB' the pool in 1e9 bytes, * "
      "marks offline oracles (they read the future), > the pool of --pool-fraction. Under it: "
      "no-cache's cost (no pool at all), lru's at the largest pool, and the full-pool saving "
      "(their difference); for each policy the smallest swept pool at which its cost is below "
      "no-cache's by at least --target of the full-pool saving; and at the pool of "
      "--pool-fraction each policy's cost saved against lru per hour of traffic: cost s saved "
      "/ the evaluated window's seconds = GPU-hours per hour (GPU-h/h), times "
      "--gpu-hour-price = money per hour (per h). lru and no-cache always run. JSON holds "
      "every pool as `compare --format json` prints it; docs/planning.md.");
  flags->input.Register(cmd, "trace to plan for (Mooncake or Bailian JSONL)");
  cmd->add_option("--policies", flags->policies,
                  absl::StrCat("comma-separated policies, from: ", JoinedPolicyNames(","),
                               " (default: all; learned-model only with --model)"));
  cmd->add_option("--model", flags->model,
                  "learned model file from `kvlearn train`: runs learned-model, and 'learned' "
                  "follows it too (without one, 'learned' follows lru and gdsf)");
  cmd->add_option("--sizes", flags->sizes, "pool sizes in the sweep (plus --pool-fraction's)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  cmd->add_option("--min-fraction", flags->min_fraction,
                  "smallest pool, as a share of the trace's distinct-block bytes")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 1e6));
  cmd->add_option("--max-fraction", flags->max_fraction,
                  "largest pool, as a share of the distinct-block bytes (1: every block fits)")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 1e6));
  cmd->add_option("--pool-fraction", flags->pool_fraction,
                  "your pool, as a share of the distinct-block bytes: added to the sweep, sizes "
                  "--prefill-nodes auto, and priced against lru")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 1e6));
  cmd->add_option("--target", flags->target,
                  "share of the full-pool saving the smallest-pool answer asks for")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 1));
  cmd->add_option("--gpu-hour-price", flags->gpu_hour_price,
                  "price of one GPU-hour (any currency): adds money per hour to the savings")
      ->check(FiniteRange(0, 1e9));
  flags->cost.Register(cmd);
  cmd->add_option("--eval-from", flags->eval_from,
                  "share of requests used only to warm the pool; costs cover the rest")
      ->capture_default_str()
      ->check(FiniteRange(0, 0.999999));
  cmd->add_option("--transfer-weight", flags->transfer_weight,
                  "w in cost_seconds = prefill GPU-seconds + w * transfer seconds")
      ->capture_default_str()
      ->check(FiniteRange(0, 1e9));
  cmd->add_option("--format", flags->format, "output format on stdout")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--out-dir", flags->out_dir,
                  "also write plan.json and plan.csv here (created if missing); "
                  "scripts/plot_plan.py draws the JSON");
  cmd->add_flag("--quiet", flags->quiet,
                "no progress line (drawn on stderr only when it is a terminal: requests replayed "
                "over all policies and sizes, rate, ETA)");
  cmd->add_option("--sample", flags->sample,
                  "replay a sample of the trace, rate R in (0, 1] (0: the whole trace): "
                  "requests kept by a hash of the first block of their chain that few requests "
                  "share, pools R times smaller (shared blocks kept whole), costs and counts "
                  "scaled back; hit ratios and cost within the errors docs/planning.md gives "
                  "for each rate; TTFT and utilization are the sample's")
      ->capture_default_str()
      ->check(FiniteRange(0, 1));
  cmd->add_option("--sample-salt", flags->sample_salt,
                  "with --sample: another salt of the key hash draws another sample")
      ->capture_default_str();
  return {cmd, [flags] { return RunPlan(*flags); }};
}

}  // namespace kvlearn
