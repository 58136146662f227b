// What one RetentionClient call costs the engine: Admit through a live
// in-process sidecar over loopback gRPC (the arrival flushed first, as the
// protocol does), and Admit / RankEviction answered locally once the sidecar
// is down and the breaker open.
//   build/bench/retention_client_bench
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include "clients/retention_client.h"
#include "server/sidecar_server.h"

namespace kvlearn {
namespace {

constexpr int64_t kBytes = 512 * 131072;

struct Sidecar {
  std::string dir;
  std::unique_ptr<SidecarServer> server;
  Sidecar() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kvlearn_client_bench_XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    SidecarOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "";
    o.data_dir = dir;
    o.policy = "lru";
    auto s = SidecarServer::Start(o);
    if (s.ok()) server = std::move(*s);
  }
  ~Sidecar() {
    if (server) server->Shutdown();
    std::filesystem::remove_all(dir);
  }
};

RetentionClientOptions Options(int port) {
  RetentionClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(port);
  o.node_id = "bench";
  o.call_deadline = std::chrono::seconds(1);
  o.breaker_backoff = std::chrono::hours(1);
  return o;
}

// One new root block per iteration: arrival, Admit (flushes the arrival), stored.
void BM_AdmitLiveSidecar(benchmark::State& state) {
  Sidecar sidecar;
  if (!sidecar.server) return state.SkipWithError("no sidecar");
  RetentionClient client(Options(sidecar.server->port()));
  uint64_t id = 1;
  for (auto _ : state) {
    client.ReportArrival({{id}, 512, 0, {512}, {kBytes}});
    benchmark::DoNotOptimize(client.Admit({{id, std::nullopt, 512, kBytes}}));
    client.ReportStored({id, std::nullopt, 512, kBytes});
    ++id;
  }
  state.counters["fallbacks"] = static_cast<double>(client.Stats().fallbacks_total["Admit"]);
}
BENCHMARK(BM_AdmitLiveSidecar)->UseRealTime();

// The sidecar is gone and the breaker open: the answer is local at once.
void BM_AdmitSidecarDown(benchmark::State& state) {
  int port;
  {
    Sidecar sidecar;
    if (!sidecar.server) return state.SkipWithError("no sidecar");
    port = sidecar.server->port();
  }
  RetentionClient client(Options(port));
  for (int i = 0; i < 3; ++i) client.Admit({{1, std::nullopt, 512, kBytes}});  // opens it
  uint64_t id = 1;
  for (auto _ : state) {
    client.ReportArrival({{id}, 512, 0, {512}, {kBytes}});
    benchmark::DoNotOptimize(client.Admit({{id, std::nullopt, 512, kBytes}}));
    client.ReportStored({id, std::nullopt, 512, kBytes});
    ++id;
  }
  state.counters["rpc_attempts"] =
      static_cast<double>(client.Stats().rpc_attempts_total["ReportEvents"] +
                          client.Stats().rpc_attempts_total["Admit"]);
}
BENCHMARK(BM_AdmitSidecarDown)->UseRealTime();

// Local RankEviction of one block among `range(0)` tracked, with the sidecar
// down; one block stored per iteration keeps the size constant.
void BM_RankEvictionSidecarDown(benchmark::State& state) {
  int port;
  {
    Sidecar sidecar;
    if (!sidecar.server) return state.SkipWithError("no sidecar");
    port = sidecar.server->port();
  }
  RetentionClient client(Options(port));
  for (int i = 0; i < 3; ++i) client.Admit({{1, std::nullopt, 512, kBytes}});
  uint64_t id = 1;
  for (; id <= static_cast<uint64_t>(state.range(0)); ++id) {
    client.ReportArrival({{id}});
    client.ReportStored({id, std::nullopt, 512, kBytes});
  }
  for (auto _ : state) {
    client.ReportArrival({{id}});
    benchmark::DoNotOptimize(client.RankEviction(kBytes));
    client.ReportStored({id, std::nullopt, 512, kBytes});
    ++id;
  }
}
BENCHMARK(BM_RankEvictionSidecarDown)->Arg(1000)->Arg(100000)->UseRealTime();

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
