// Replay throughput of the pool simulator per policy, in block accesses per
// second, pool = 10% of the distinct-block bytes: BM_Replay/<policy> on a
// generated chat trace (kvlearn gen --kind chat, seed 7), where `learned`
// and `lru` keep the same blocks, and BM_ReplayMixed/<policy> (lru and
// learned only) on a mixed one (--kind mixed, seed 7), where the model's
// admissions, evictions and bets decide. The learned policy runs a model
// trained at start-up on each trace's first 20k requests (as `kvlearn train`
// would). BM_ReplayFile/<policy>/<pool permille> replays a trace file
// (--trace=FILE, default the shipped sample) at pools of 1% and 10%, as
// scripts/compare_cachesim.sh times it beside libCacheSim.
//   build/bench/replay_bench [--requests=N] [--trace=FILE]  (default 200000 requests)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/cost_model.h"
#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"
#include "learner/sample_recorder.h"
#include "learner/trainer.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"

namespace kvlearn {
namespace {

uint32_t g_requests = 200000;
std::string g_trace = "datasets/mooncake_conversation_trace.jsonl";

struct Fixture {
  Trace trace;
  CostModel cost{*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100")};
  std::unique_ptr<ReplayTrace> replay;
  std::shared_ptr<const LearnedModel> model;  // trained on first use: Model()

  std::shared_ptr<const LearnedModel> Model();
};

std::shared_ptr<const LearnedModel> TrainBenchModel(const ReplayTrace& replay,
                                                    const CostModel& cost) {
  RecordOptions record;
  record.pool_bytes = replay.distinct_block_bytes / 10;
  record.end_request = 20000;
  auto samples = RecordSamples(replay, cost, record);
  TrainOptions options;
  options.max_epochs = 3;
  auto mlp = TrainMlp(samples->Slice(0, 15000), samples->Slice(15000, 20000), options, nullptr);
  ModelMetadata meta;
  meta.schema_version = kFeatureSchemaVersion;
  meta.horizons_seconds = record.horizons_seconds;
  meta.feature_mean = mlp->feature_mean;
  meta.feature_std = mlp->feature_std;
  return *MlpModel::Create(mlp->layers, meta, "bench");
}

std::shared_ptr<const LearnedModel> Fixture::Model() {
  if (model == nullptr) model = TrainBenchModel(*replay, cost);
  return model;
}

// Built on first use: a run filtered to one trace's benchmarks builds only it.
Fixture* NewFixture(Trace trace) {
  auto* fx = new Fixture;
  fx->trace = std::move(trace);
  fx->replay = std::make_unique<ReplayTrace>(*BuildReplayTrace(fx->trace, fx->cost));
  return fx;
}
Fixture& FileFixture() {
  static Fixture* f = [] {
    auto trace = ReadTrace(g_trace, {});
    if (!trace.ok()) {
      std::fprintf(stderr, "replay_bench: %s\n", std::string(trace.status().message()).c_str());
      std::exit(1);
    }
    return NewFixture(*std::move(trace));
  }();
  return *f;
}
Fixture& ChatFixture() {
  static Fixture* f = [] {
    ChatWorkloadOptions o;
    o.seed = 7;
    o.requests = g_requests;
    return NewFixture(GenerateChatTrace(o));
  }();
  return *f;
}
Fixture& MixedFixture() {
  static Fixture* f = [] {
    MixedWorkloadOptions o;
    o.seed = 7;
    o.requests = g_requests;
    return NewFixture(GenerateMixedTrace(o));
  }();
  return *f;
}

// The pool is state.range(0) permille of the distinct-block bytes.
void BM_Replay(benchmark::State& state, Fixture& (*fixture)(), std::string policy) {
  Fixture& f = fixture();
  PoolReplayOptions options;
  options.pool_bytes = f.replay->distinct_block_bytes * state.range(0) / 1000;
  if (PolicyUsesModel(policy)) options.model = f.Model();
  for (auto _ : state) {
    auto result = ReplayPool(*f.replay, f.cost, policy, options);
    if (!result.ok()) {
      state.SkipWithError(std::string(result.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(result->block_hits);
    state.counters["hit_ratio"] = result->block_hit_ratio();
  }
  state.SetItemsProcessed(state.iterations() * f.replay->block_accesses());
}

void BM_BuildReplayTrace(benchmark::State& state) {
  const Fixture& f = ChatFixture();
  for (auto _ : state) {
    auto replay = BuildReplayTrace(f.trace, f.cost);
    benchmark::DoNotOptimize(replay->catalog.size());
  }
  state.SetItemsProcessed(state.iterations() * f.trace.hash_ids.size());
}

}  // namespace
}  // namespace kvlearn

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--requests=", 0) == 0) kvlearn::g_requests = std::atoi(arg.c_str() + 11);
    if (arg.rfind("--trace=", 0) == 0) kvlearn::g_trace = arg.substr(8);
  }
  for (const auto name : kvlearn::PolicyNames()) {
    benchmark::RegisterBenchmark(("BM_Replay/" + std::string(name)).c_str(), kvlearn::BM_Replay,
                                 kvlearn::ChatFixture, std::string(name))
        ->Arg(100)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const auto name : kvlearn::PolicyNames()) {
    if (kvlearn::PolicyNeedsModel(name)) continue;
    benchmark::RegisterBenchmark(("BM_ReplayFile/" + std::string(name)).c_str(), kvlearn::BM_Replay,
                                 kvlearn::FileFixture, std::string(name))
        ->Arg(10)
        ->Arg(100)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* name : {"lru", "learned"}) {
    benchmark::RegisterBenchmark((std::string("BM_ReplayMixed/") + name).c_str(),
                                 kvlearn::BM_Replay, kvlearn::MixedFixture, std::string(name))
        ->Arg(100)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_BuildReplayTrace", kvlearn::BM_BuildReplayTrace)
      ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
