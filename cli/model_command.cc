// `kvlearn model list|evaluate|promote|rollback`: the model registry of a
// sidecar's data directory (server/model_registry.h). evaluate prices a
// registered version on the newest logged requests beside the serving one and
// the heuristics; promote does the same and makes it serve only if it costs no
// more than both the serving version and lru there (or with --force), hot-
// reloading a running sidecar (ReloadModel) before recording it, or, when the
// sidecar runs an experiment, recording it and then having the sidecar reload
// its experiment (arms naming "registry:serving" follow registry.json);
// rollback restores the version that served before.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/command.h"
#include "cli/cost_flags.h"
#include "cli/flag_checks.h"
#include "cli/log_window_flags.h"
#include "cli/logged_trace.h"
#include "cli/replay_input.h"
#include "cli/sidecar_call_context.h"
#include "core/progress_line.h"
#include "kvlearn/v1/retention.grpc.pb.h"
#include "learner/model_judge.h"
#include "models/model_judgement.h"
#include "server/model_registry.h"

namespace kvlearn {
namespace {

struct ModelFlags {
  std::string data_dir;
  std::string candidate;  // evaluate, promote: a version
  // The window evaluated: the newest requests of the log.
  uint32_t window_requests = 2000;
  uint32_t warmup_requests = 2000;
  double pool_fraction = 0.1;
  LoggedTraceOptions read;  // --node, --since, --until, --block-size
  CostFlags cost;
  bool force = false;
  std::string by;  // promote, rollback: who (default: user@host)
  // The serving sidecar to hot-reload (promote, rollback).
  std::string sidecar;
  std::string token;
  double timeout_seconds = 10;
  bool quiet = false;
};

int Fail(const std::string& command, const absl::Status& s) {
  std::cerr << "kvlearn model " << command << ": " << s.message() << "\n";
  return 1;
}

// "3" or "v3".
absl::StatusOr<int> ParseVersion(const std::string& text) {
  int v = 0;
  if (!absl::SimpleAtoi(absl::StripPrefix(text, "v"), &v) || v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CANDIDATE '", text,
        "' is not a version: give its number as `kvlearn model list` shows it (3 or v3)"));
  }
  return v;
}

std::string VerdictOf(const LearnedModel& model) {
  const auto& j = model.metadata().judgement;
  if (!j.has_value()) return "not judged";
  return j->fit() ? "fit" : "unfit";
}

std::string WindowSummary(const RegistryEntry& e) {
  if (!e.window.has_value()) return "(not from the log)";
  const LogWindow& w = *e.window;
  return absl::StrFormat("%d requests, %d..%d ms%s", w.requests, w.first_ms, w.last_ms,
                         w.node.empty() ? "" : absl::StrCat(", node ", w.node));
}

std::unique_ptr<v1::Retention::Stub> SidecarStub(const ModelFlags& f) {
  return v1::Retention::NewStub(grpc::CreateChannel(f.sidecar, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> SidecarContext(const ModelFlags& f) {
  return SidecarCallContext(f.timeout_seconds, f.token);
}

// "sidecar ADDR serves MODEL (vN)": the registered version whose checksum the
// sidecar's model version carries, or what it serves instead.
absl::Status PrintSidecarModel(const ModelFlags& f, const ModelRegistry& registry) {
  v1::GetStatusResponse r;
  const grpc::Status s = SidecarStub(f)->GetStatus(SidecarContext(f).get(), {}, &r);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the sidecar at ", f.sidecar, " did not answer (GetStatus: ", s.error_message(), ")"));
  }
  std::string which = "not a registered version";
  for (const RegistryEntry& e : registry.entries()) {
    if (e.problem.empty() && r.model_version().ends_with(absl::StrCat("@", e.checksum))) {
      which = absl::StrCat("v", e.version);
    }
  }
  std::cout << "sidecar " << f.sidecar << " serves "
            << (r.model_version().empty() ? "no model" : r.model_version()) << " ("
            << (r.model_version().empty() ? "policy " + r.policy() : which) << ")\n";
  return absl::OkStatus();
}

int RunList(const ModelFlags& f) {
  auto registry = ModelRegistry::Open(f.data_dir);
  if (!registry.ok()) return Fail("list", registry.status());
  const auto serving = registry->serving();
  std::cout << "registry " << registry->dir() << ": " << registry->entries().size()
            << " versions, serving "
            << (serving.has_value() ? absl::StrCat("v", *serving) : std::string("none")) << "\n";
  if (!f.sidecar.empty()) {
    if (auto s = PrintSidecarModel(f, *registry); !s.ok()) return Fail("list", s);
  }
  if (registry->entries().empty()) return 0;
  std::cout << absl::StrFormat("  %-8s %-7s %-20s %-6s %-10s %s\n", "version", "serving",
                               "created (UTC)", "parent", "verdict", "trained on");
  for (const RegistryEntry& e : registry->entries()) {
    std::string verdict = "damaged";
    if (e.problem.empty()) {
      auto model = LearnedModel::Load(registry->PathOf(e));
      verdict = model.ok() ? VerdictOf(**model) : "unloadable";
    }
    std::cout << absl::StrFormat(
        "  %-8s %-7s %-20s %-6s %-10s %s\n", absl::StrCat("v", e.version),
        serving == e.version ? "*" : "", e.created_at,
        e.parent.has_value() ? absl::StrCat("v", *e.parent) : std::string("-"), verdict,
        e.problem.empty() ? WindowSummary(e) : absl::StrCat("refused: ", e.problem));
  }
  for (const ServingChange& c : registry->history()) {
    std::cout << absl::StrFormat(
        "  %s %s v%d (from %s) by %s%s%s\n", c.at, c.action, c.to,
        c.from.has_value() ? absl::StrCat("v", *c.from) : std::string("none"), c.by,
        c.forced ? ", forced" : "", c.evaluation.empty() ? "" : absl::StrCat(": ", c.evaluation));
  }
  return 0;
}

// The costs of the candidate, the serving version and the heuristics on the
// newest logged window.
struct Evaluation {
  // candidate, serving (if any), each of them alone (learned-model), then the
  // heuristics
  std::vector<JudgedPolicy> rows;
  double candidate_cost_s = 0;
  std::optional<double> serving_cost_s;
  // The models alone: under `learned` any model costs about what the cheaper
  // heuristic does, so a model without signal shows only here.
  double candidate_alone_cost_s = 0;
  std::optional<double> serving_alone_cost_s;
  double lru_cost_s = 0;
  std::string summary;  // one line, for the history
};

absl::StatusOr<Evaluation> Evaluate(const ModelFlags& f, const ModelRegistry& registry,
                                    const RegistryEntry& candidate, const char* command) {
  auto cost = f.cost.Resolve();
  if (!cost.ok()) return cost.status();
  const std::string name = absl::StrCat("v", candidate.version);
  std::vector<NamedModel> models;
  std::vector<std::string> name_of;  // "vN" of each model loaded
  auto load = [&](const RegistryEntry& e, const std::string& label) -> absl::Status {
    auto model = LoadModelForReplay(registry.PathOf(e), f.read.block_size, {});
    if (!model.ok()) return model.status();
    models.push_back({label, *model});
    name_of.push_back(absl::StrCat("v", e.version));
    return absl::OkStatus();
  };
  if (auto s = load(candidate, absl::StrCat(name, " (candidate)")); !s.ok()) return s;
  const auto serving = registry.serving();
  if (serving.has_value() && *serving != candidate.version) {
    auto entry = registry.Check(*serving);
    if (!entry.ok()) {
      if (!f.force) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot compare against the serving version: ", entry.status().message(),
                         "; --force goes on without it"));
      }
      std::cerr << "kvlearn model " << command
                << ": the serving version is left out: " << entry.status().message() << "\n";
    } else if (auto s = load(**entry, absl::StrCat("v", *serving, " (serving)")); !s.ok()) {
      return s;
    }
  }

  // Each model alone too, after the models as they serve.
  const size_t serving_models = models.size();
  for (size_t i = 0; i < serving_models; ++i) {
    models.push_back({absl::StrCat(name_of[i], " alone"), models[i].model, "learned-model"});
  }

  // Only the requests priced are held, however long the log.
  LoggedTraceOptions read = f.read;
  read.newest_requests = uint64_t{f.window_requests} + f.warmup_requests;
  auto logged = ReadLoggedTraceIn(f.data_dir, read, absl::StrCat("model ", command), f.quiet);
  if (!logged.ok()) return logged.status();
  // The newest warm-up + window requests; with fewer, the window keeps its
  // share and the warm-up takes what is left.
  const Trace& all = logged->trace;
  const auto n = static_cast<uint32_t>(all.requests.size());
  const uint32_t window = std::min(f.window_requests, n);
  const uint32_t warmup = std::min(f.warmup_requests, n - window);
  Trace trace;
  trace.source = f.data_dir;
  trace.block_size = all.block_size;
  for (uint32_t i = n - window - warmup; i < n; ++i) {
    const TraceRequest& r = all.requests[i];
    trace.Add(r.timestamp_ms, r.input_length, r.output_length, all.BlocksOf(r), r.line);
  }
  TraceReadOptions options;
  options.block_size = f.read.block_size;
  auto replay = PrepareTraceForReplay(f.data_dir, options, *cost, absl::StrCat("model ", command),
                                      std::cerr, trace);
  if (!replay.ok()) return replay.status();
  JudgeOptions judge;
  judge.first_request = warmup;
  judge.end_request = warmup + window;
  judge.pool_fractions = {f.pool_fraction};
  judge.distinct_block_bytes = replay->distinct_block_bytes;
  const uint64_t replays = models.size() + JudgingHeuristics().size();
  ProgressLine judging(absl::StrCat("kvlearn model ", command, ": replayed"),
                       replays * judge.end_request, "requests",
                       ProgressLine::Wanted(STDERR_FILENO, f.quiet), std::cerr);
  judge.requests_done = &judging.counter();
  judging.Start();
  auto tables = PriceModels(trace, *cost, models, judge);
  judging.Finish();
  if (!tables.ok()) return tables.status();

  Evaluation ev;
  ev.rows = (*tables)[0];
  ev.candidate_cost_s = ev.rows[0].cost_s;
  ev.candidate_alone_cost_s = ev.rows[serving_models].cost_s;
  if (serving_models > 1) {
    ev.serving_cost_s = ev.rows[1].cost_s;
    ev.serving_alone_cost_s = ev.rows[serving_models + 1].cost_s;
  }
  for (const JudgedPolicy& row : ev.rows) {
    if (row.policy == "lru") ev.lru_cost_s = row.cost_s;
  }
  const double pool_bytes = f.pool_fraction * replay->distinct_block_bytes;
  std::cout << absl::StrFormat(
      "window: the newest %d logged requests (%d..%d ms), after %d warming the pool; pool %g "
      "of their distinct-block bytes (%.1f GB)\n  %-18s %12s %9s\n",
      window, trace.requests[warmup].timestamp_ms, trace.requests.back().timestamp_ms, warmup,
      f.pool_fraction, pool_bytes / 1e9, "policy", "cost s", "vs lru %");
  for (const JudgedPolicy& row : ev.rows) {
    const double lru = ev.lru_cost_s;
    std::cout << absl::StrFormat("  %-18s %12.1f %+9.2f\n", row.policy, row.cost_s,
                                 lru > 0 ? 100 * (row.cost_s / lru - 1) : 0.0);
  }
  ev.summary = absl::StrFormat("%s %.1f s, lru %.1f s", name, ev.candidate_cost_s, ev.lru_cost_s);
  if (ev.serving_cost_s.has_value()) {
    absl::StrAppend(&ev.summary,
                    absl::StrFormat(", serving v%d %.1f s", *serving, *ev.serving_cost_s));
  }
  absl::StrAppend(&ev.summary, absl::StrFormat(" on the newest %d requests (%d..%d ms)", window,
                                               trace.requests[warmup].timestamp_ms,
                                               trace.requests.back().timestamp_ms));
  return ev;
}

// Why `ev` does not let its candidate serve ("costs more than ..."); empty
// when it does.
std::string Refusal(const Evaluation& ev) {
  std::vector<std::string> costlier;
  if (ev.serving_cost_s.has_value() && ev.candidate_cost_s > *ev.serving_cost_s) {
    costlier.push_back(absl::StrFormat("the serving version (%.1f s against %.1f s)",
                                       ev.candidate_cost_s, *ev.serving_cost_s));
  }
  if (ev.candidate_cost_s > ev.lru_cost_s) {
    costlier.push_back(
        absl::StrFormat("lru (%.1f s against %.1f s)", ev.candidate_cost_s, ev.lru_cost_s));
  }
  if (ev.serving_alone_cost_s.has_value() && ev.candidate_alone_cost_s > *ev.serving_alone_cost_s) {
    costlier.push_back(
        absl::StrFormat("the serving version, each model alone (%.1f s against %.1f s)",
                        ev.candidate_alone_cost_s, *ev.serving_alone_cost_s));
  }
  return costlier.empty() ? ""
                          : absl::StrCat("costs more than ", absl::StrJoin(costlier, " and than "));
}

// Swaps the model of the sidecar at f.sidecar (ReloadModel) and checks it
// now serves `entry`'s bytes.
absl::Status ReloadSidecar(const ModelFlags& f, const ModelRegistry& registry,
                           const RegistryEntry& entry) {
  const std::string path = std::filesystem::absolute(registry.PathOf(entry)).string();
  auto ctx = SidecarContext(f);
  v1::ReloadModelRequest req;
  req.set_path(path);
  v1::ReloadModelResponse r;
  const grpc::Status s = SidecarStub(f)->ReloadModel(ctx.get(), req, &r);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the sidecar at ", f.sidecar, " did not take ", path, " (ReloadModel: ", s.error_message(),
        "); it keeps its model, and the registry was not changed"));
  }
  if (!r.model_version().ends_with(absl::StrCat("@", entry.checksum))) {
    return absl::DataLossError(absl::StrCat("the sidecar at ", f.sidecar, " reports model ",
                                            r.model_version(), ", not the checksum ",
                                            entry.checksum, " registered for v", entry.version));
  }
  std::cout << "sidecar " << f.sidecar << " now serves " << r.model_version() << "\n";
  return absl::OkStatus();
}

// The registry and CANDIDATE's entry, refused when it is damaged.
absl::StatusOr<std::pair<ModelRegistry, int>> OpenCandidate(const ModelFlags& f) {
  auto version = ParseVersion(f.candidate);
  if (!version.ok()) return version.status();
  auto registry = ModelRegistry::Open(f.data_dir);
  if (!registry.ok()) return registry.status();
  if (auto entry = registry->Check(*version); !entry.ok()) return entry.status();
  return std::make_pair(*std::move(registry), *version);
}

int RunEvaluate(const ModelFlags& f) {
  auto opened = OpenCandidate(f);
  if (!opened.ok()) return Fail("evaluate", opened.status());
  auto& [registry, version] = *opened;
  const RegistryEntry& entry = **registry.Find(version);
  auto ev = Evaluate(f, registry, entry, "evaluate");
  if (!ev.ok()) return Fail("evaluate", ev.status());
  const std::string why = Refusal(*ev);
  std::cout << (why.empty() ? absl::StrCat("promotable: v", version, " costs no more than ",
                                           ev->serving_cost_s ? "the serving version (and its "
                                                                "model alone no more than the "
                                                                "serving one's) and "
                                                              : "",
                                           "lru on this window")
                            : absl::StrCat("not promotable: v", version, " ", why))
            << "\n";
  return 0;
}

// Whether the sidecar at f.sidecar runs --experiment (its arms name their
// models, so it reloads its experiment rather than a model file).
absl::StatusOr<bool> SidecarRunsExperiment(const ModelFlags& f) {
  v1::GetStatusResponse r;
  const grpc::Status s = SidecarStub(f)->GetStatus(SidecarContext(f).get(), {}, &r);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("the sidecar at ", f.sidecar,
                                               " did not answer (GetStatus: ", s.error_message(),
                                               "); the registry was not changed"));
  }
  return r.policy() == "experiment";
}

// Asks the experiment sidecar at f.sidecar to reload its experiment (arms
// naming registry:serving then load what registry.json now names) and says
// which arms serve `entry`.
absl::Status ReloadSidecarExperiment(const ModelFlags& f, const RegistryEntry& entry) {
  auto ctx = SidecarContext(f);
  v1::ReloadModelRequest req;
  req.set_experiment(true);
  v1::ReloadModelResponse r;
  const grpc::Status s = SidecarStub(f)->ReloadModel(ctx.get(), req, &r);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("the sidecar at ", f.sidecar,
                                               " did not reload its experiment (ReloadModel: ",
                                               s.error_message(), "); it keeps its models"));
  }
  const std::vector<std::string> arms = absl::StrSplit(r.experiment_arms(), ',');
  const bool serves = std::any_of(arms.begin(), arms.end(), [&](const std::string& arm) {
    return arm.ends_with(absl::StrCat("@", entry.checksum));
  });
  std::cout << "sidecar " << f.sidecar << " reloaded its experiment: arms " << r.experiment_arms()
            << "\n";
  if (!serves) {
    std::cerr << "kvlearn model: note: no arm of the sidecar's experiment serves v" << entry.version
              << " (only arms whose model is registry:serving follow the "
              << "registry)\n";
  }
  return absl::OkStatus();
}

// Makes `to` serve. A sidecar serving one model reloads it before the
// registry records it; an experiment sidecar reloads its experiment after
// (its arms read registry.json), and the record is taken back if it refuses.
int Switch(const ModelFlags& f, ModelRegistry& registry, const RegistryEntry& to,
           const char* command, const std::string& evaluation, bool forced) {
  bool experiment = false;
  if (!f.sidecar.empty()) {
    auto runs = SidecarRunsExperiment(f);
    if (!runs.ok()) return Fail(command, runs.status());
    experiment = *runs;
    if (!experiment) {
      if (auto s = ReloadSidecar(f, registry, to); !s.ok()) return Fail(command, s);
    }
  }
  CrashPoint("before-record");
  ServingChange change;
  change.action = command;
  change.to = to.version;
  change.from = registry.serving();
  change.by = f.by.empty() ? CurrentUser() : f.by;
  change.at = UtcNow();
  change.forced = forced;
  change.evaluation = evaluation;
  if (auto s = registry.Record(change); !s.ok()) return Fail(command, s);
  if (experiment) {
    CrashPoint("before-experiment-reload");
    if (auto s = ReloadSidecarExperiment(f, to); !s.ok()) {
      const absl::Status undone = registry.UndoLast();
      const std::string after =
          undone.ok() ? "; the registry was restored"
                      : absl::StrCat("; restoring the registry failed too: ", undone.message());
      return Fail(command, absl::Status(s.code(), absl::StrCat(s.message(), after)));
    }
  }
  std::cout << absl::StrFormat(
      "%s: v%d serves (was %s), recorded in %s/registry.json\n", command, to.version,
      change.from.has_value() ? absl::StrCat("v", *change.from) : std::string("none"),
      registry.dir());
  return 0;
}

int RunPromote(const ModelFlags& f) {
  auto opened = OpenCandidate(f);
  if (!opened.ok()) return Fail("promote", opened.status());
  auto& [registry, version] = *opened;
  const RegistryEntry& entry = **registry.Find(version);
  if (registry.serving() == version) {
    return Fail("promote",
                absl::FailedPreconditionError(absl::StrCat("v", version, " already serves")));
  }
  auto ev = Evaluate(f, registry, entry, "promote");
  if (!ev.ok()) return Fail("promote", ev.status());
  const std::string why = Refusal(*ev);
  if (!why.empty() && !f.force) {
    return Fail("promote", absl::FailedPreconditionError(absl::StrCat(
                               "refused: v", version, " ", why,
                               " on the newest logged window; the serving model stays. Pass "
                               "--force to promote it anyway")));
  }
  if (!why.empty())
    std::cerr << "kvlearn model promote: --force: v" << version << " " << why << "\n";
  CrashPoint("after-evaluate");
  return Switch(f, registry, entry, "promote", ev->summary, !why.empty());
}

int RunRollback(const ModelFlags& f) {
  auto registry = ModelRegistry::Open(f.data_dir);
  if (!registry.ok()) return Fail("rollback", registry.status());
  const auto previous = registry->Previous();
  if (!previous.has_value()) {
    return Fail("rollback", absl::FailedPreconditionError(
                                registry->serving().has_value()
                                    ? absl::StrCat("v", *registry->serving(),
                                                   " was promoted when nothing served: no "
                                                   "earlier version to restore")
                                    : "no version serves: nothing to roll back"));
  }
  auto entry = registry->Check(*previous);
  if (!entry.ok()) return Fail("rollback", entry.status());
  return Switch(f, *registry, **entry, "rollback", "", false);
}

void AddDataDir(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--data-dir", f.data_dir,
                  "the sidecar's --data-dir: its event log, and the registry in its models/")
      ->required();
}

void AddSidecarFlags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--sidecar", f.sidecar,
                  "ADDR of the serving sidecar (kvlearn serve --listen): it hot-reloads the "
                  "version (ReloadModel) before the registry records it; a refusal changes "
                  "nothing. Its --model-dir, if any, must hold DATA_DIR/models. A sidecar "
                  "running --experiment reloads its experiment after the registry records "
                  "the version (its arms naming registry:serving take it; a refusal puts "
                  "the registry back)");
  cmd->add_option("--token", f.token, "bearer token for the sidecar (its --auth-tokens)")
      ->envname("KVLEARN_TOKEN");
  cmd->add_option("--timeout-seconds", f.timeout_seconds, "how long to wait for the sidecar")
      ->capture_default_str()
      ->check(FiniteRange(0.001, 86400));
  cmd->add_option("--by", f.by, "who changes the serving version (default: user@host)");
}

void AddEvaluationFlags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("CANDIDATE", f.candidate, "the registered version (3 or v3)")->required();
  cmd->add_option("--window-requests", f.window_requests, "the newest logged requests priced")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  cmd->add_option("--warmup-requests", f.warmup_requests,
                  "the requests before them that only warm the pool (fewer when the log holds "
                  "fewer)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 30));
  cmd->add_option("--pool-fraction", f.pool_fraction,
                  "pool size, a share of the distinct-block bytes of the requests replayed")
      ->capture_default_str()
      ->check(FiniteRange(1e-9, 1e6));
  cmd->add_option("--node", f.read.node, "only this node's requests");
  AddLogWindowFlags(cmd, f.read);
  cmd->add_option("--block-size", f.read.block_size, "tokens per block of the logged requests")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_flag("--quiet", f.quiet,
                "no progress lines (drawn on stderr only when it is a terminal: events scanned, "
                "requests replayed)");
  f.cost.Register(cmd);
}

}  // namespace

Command AddModelCommand(CLI::App& root) {
  auto f = std::make_shared<ModelFlags>();
  CLI::App* cmd = root.add_subcommand(
      "model",
      "The model registry in a sidecar's data directory (DATA_DIR/models, written by "
      "`kvlearn train --data-dir`): list, evaluate, promote and roll back versions "
      "(docs/training.md, 'Retraining from the sidecar's log').");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand(
      "list",
      "List the registered versions (* = serving; created; parent = the version serving when it "
      "was registered; verdict = its training verdict, or why the entry is refused; the log "
      "window it was trained on) and the history of promotions and rollbacks.");
  AddDataDir(list, *f);
  list->add_option("--sidecar", f->sidecar,
                   "ADDR of a running sidecar: also print the model it serves, and which "
                   "registered version that is (after a promote killed between the reload and "
                   "the record, the sidecar is one version ahead of registry.json)");
  list->add_option("--token", f->token, "bearer token for the sidecar (its --auth-tokens)")
      ->envname("KVLEARN_TOKEN");
  CLI::App* evaluate = cmd->add_subcommand(
      "evaluate",
      "Price CANDIDATE on the newest logged requests beside the serving version and the online "
      "heuristics, each version under `learned` as it serves and alone (`learned-model`, row "
      "'vN alone') (cost s = prefill GPU-s + transfer s of the window's requests; vs lru % = "
      "(cost - lru's) / lru's x 100), and say whether promote would take it.");
  AddDataDir(evaluate, *f);
  AddEvaluationFlags(evaluate, *f);
  CLI::App* promote = cmd->add_subcommand(
      "promote",
      "Evaluate CANDIDATE as `evaluate` does and make it serve, unless on that window it costs "
      "more than the serving version or lru, or its model alone more than the serving "
      "version's alone (then exit 1, nothing changed), or --force.");
  AddDataDir(promote, *f);
  AddEvaluationFlags(promote, *f);
  AddSidecarFlags(promote, *f);
  promote->add_flag("--force", f->force,
                    "promote even when it costs more (recorded as forced), or when the serving "
                    "version's entry is damaged");
  CLI::App* rollback = cmd->add_subcommand(
      "rollback", "Serve again the version that served before the serving one was promoted.");
  AddDataDir(rollback, *f);
  AddSidecarFlags(rollback, *f);
  return {cmd, [f, list, evaluate, promote] {
            if (list->parsed()) return RunList(*f);
            if (evaluate->parsed()) return RunEvaluate(*f);
            if (promote->parsed()) return RunPromote(*f);
            return RunRollback(*f);
          }};
}

}  // namespace kvlearn
