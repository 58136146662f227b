// Cluster simulator speed: one million requests of the mixed workload (chat,
// agent fan-out, batch) through 8 prefill nodes with HBM and DRAM tiers, the
// global pool and LRU in every tier, once per router. The trace is generated
// and prepared once, outside the timing. Reports requests per second.
//
//   build/bench/cluster_bench                      # 1M requests
//   build/bench/cluster_bench --benchmark_filter=cache_aware
// `learned` runs with the tests' small random model (tests/support): what is
// timed is the router's per-arrival work (one inference, per-node cost
// estimates), which does not depend on the weights.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/cost_model.h"
#include "datasets/workload_generator.h"
#include "sim/cluster_simulator.h"
#include "sim/replay_trace.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr uint32_t kRequests = 1'000'000;
constexpr uint32_t kNodes = 8;

struct Fixture {
  Trace trace;
  std::unique_ptr<CostModel> cost;
  std::unique_ptr<ReplayTrace> replay;
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    MixedWorkloadOptions o;
    o.requests = kRequests;
    f->trace = GenerateMixedTrace(o);
    f->cost =
        std::make_unique<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
    auto replay = BuildReplayTrace(f->trace, *f->cost);
    if (!replay.ok()) std::abort();
    f->replay = std::make_unique<ReplayTrace>(std::move(*replay));
    return f;
  }();
  return *fixture;
}

void BM_Cluster(benchmark::State& state, const std::string& router) {
  const Fixture& f = GetFixture();
  ClusterOptions o;
  FillClusterCapacities(*f.cost, o);
  o.prefill_nodes = kNodes;
  o.pool_bytes = f.replay->distinct_block_bytes / 10;
  o.router = router;
  o.replication.rule.prefix_blocks = 16;
  o.model = MakeTestModel();
  double ttft_mean = 0;
  for (auto _ : state) {
    auto r = ReplayCluster(*f.replay, *f.cost, o);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    ttft_mean = r->replay.ttft_ms.mean;
  }
  state.SetItemsProcessed(state.iterations() * f.trace.requests.size());
  state.counters["requests"] = static_cast<double>(f.trace.requests.size());
  state.counters["ttft_mean_ms"] = ttft_mean;
}

BENCHMARK_CAPTURE(BM_Cluster, round_robin, std::string("round-robin"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cluster, least_load, std::string("least-load"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cluster, cache_aware, std::string("cache-aware"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cluster, cache_aware_approx, std::string("cache-aware-approx"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cluster, burst_replicate, std::string("burst-replicate"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Cluster, learned, std::string("learned"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
