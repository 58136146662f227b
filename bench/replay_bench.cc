// Replay throughput of the pool simulator per policy, in block accesses per
// second, pool = 10% of the distinct-block bytes: BM_Replay/<policy> on a
// generated chat trace (kvlearn gen --kind chat, seed 7), where `learned`
// and `lru` keep the same blocks, and BM_ReplayMixed/<policy> (lru and
// learned only) on a mixed one (--kind mixed, seed 7), where the model's
// admissions, evictions and bets decide. The learned policy runs a model
// trained at start-up on each trace's first 20k requests (as `kvlearn train`
// would).
//   build/bench/replay_bench [--requests=N]  (default 200000 requests)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/cost_model.h"
#include "datasets/workload_generator.h"
#include "learner/sample_recorder.h"
#include "learner/trainer.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "sim/replay_trace.h"

namespace kvlearn {
namespace {

uint32_t g_requests = 200000;

struct Fixture {
  Trace trace;
  CostModel cost{*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100")};
  std::unique_ptr<ReplayTrace> replay;
  std::shared_ptr<const LearnedModel> model;
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

// Built on first use: a run filtered to one trace's benchmarks builds only it.
Fixture* NewFixture(Trace trace) {
  auto* fx = new Fixture;
  fx->trace = std::move(trace);
  fx->replay = std::make_unique<ReplayTrace>(*BuildReplayTrace(fx->trace, fx->cost));
  fx->model = TrainBenchModel(*fx->replay, fx->cost);
  return fx;
}
const Fixture& ChatFixture() {
  static Fixture* f = [] {
    ChatWorkloadOptions o;
    o.seed = 7;
    o.requests = g_requests;
    return NewFixture(GenerateChatTrace(o));
  }();
  return *f;
}
const Fixture& MixedFixture() {
  static Fixture* f = [] {
    MixedWorkloadOptions o;
    o.seed = 7;
    o.requests = g_requests;
    return NewFixture(GenerateMixedTrace(o));
  }();
  return *f;
}

void BM_Replay(benchmark::State& state, const Fixture& (*fixture)(), std::string policy) {
  const Fixture& f = fixture();
  PoolReplayOptions options;
  options.pool_bytes = f.replay->distinct_block_bytes / 10;
  if (PolicyUsesModel(policy)) options.model = f.model;
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
  }
  for (const auto name : kvlearn::PolicyNames()) {
    benchmark::RegisterBenchmark(("BM_Replay/" + std::string(name)).c_str(), kvlearn::BM_Replay,
                                 kvlearn::ChatFixture, std::string(name))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* name : {"lru", "learned"}) {
    benchmark::RegisterBenchmark((std::string("BM_ReplayMixed/") + name).c_str(),
                                 kvlearn::BM_Replay, kvlearn::MixedFixture, std::string(name))
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
