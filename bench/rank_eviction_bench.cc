// RankEviction latency over loopback gRPC with 64 candidates, beside an empty
// unary call (the standard health Check) on the same server, channel and run:
// the difference is what kvlearn adds to a call.
//   build/bench/rank_eviction_bench
// Reports p50/p99 in microseconds as counters (p50_us, p99_us); the
// *OverEmpty rows alternate the two calls and report the difference
// (GetStatusOverEmpty: what a kvlearn method that does nothing adds). The
// RankEviction cases run twice: on an LRU sidecar and on a learned one
// (the tests' small model, written to a model file at start-up; the learned
// policy ranks from each block's stored reuse curve, so the model's size
// does not enter the ranking). RankEviction64ShadowsOverEmpty runs the
// LRU sidecar as a one-arm experiment with two shadow policies (lru and
// gdsf, server/shadow_pool.h), each replaying the 40,000 arrivals.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kvlearn/v1/retention.grpc.pb.h"
#include "models/learned_model.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/sidecar_server.h"

namespace kvlearn {

std::string WriteRankBenchModel(const std::string& dir);  // rank_eviction_model.cc

namespace {

const uint64_t kResident = getenv("KVLEARN_BENCH_RESIDENT")
                               ? strtoull(getenv("KVLEARN_BENCH_RESIDENT"), nullptr, 10)
                               : 40000;
constexpr int kCandidates = 64;

struct Fixture {
  std::string dir;
  std::unique_ptr<SidecarServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Retention::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::vector<uint64_t> resident;  // ids the sidecar still holds
};

v1::Event Event(uint64_t id, bool arrival) {
  v1::Event e;
  e.set_node_id("bench");
  e.set_tier(v1::TIER_POOL);
  if (arrival) {
    e.mutable_request_arrival()->add_block_ids(id);
  } else {
    auto* s = e.mutable_block_stored();
    s->set_block_id(id);
    s->set_tokens(512);
    s->set_bytes(512 * 131072);
  }
  return e;
}

// A RankEviction request for one victim among kCandidates distinct resident
// ids, drawn by a partial Fisher-Yates that leaves them at the end of
// `resident`.
v1::RankRequest SampleCandidates(std::vector<uint64_t>& resident, std::mt19937_64& rng) {
  v1::RankRequest req;
  req.set_node_id("bench");
  req.set_tier(v1::TIER_POOL);
  req.set_bytes_to_free(1);
  const size_t n = resident.size();
  for (int i = 0; i < kCandidates; ++i) {
    std::swap(resident[n - 1 - i], resident[rng() % (n - i)]);
    req.add_candidate_ids(resident[n - 1 - i]);
  }
  return req;
}

// Drops the victim, one of the candidates SampleCandidates just drew, from
// `resident`.
void Forget(std::vector<uint64_t>& resident, uint64_t victim) {
  auto it = std::find(resident.end() - kCandidates, resident.end(), victim);
  std::swap(*it, resident.back());
  resident.pop_back();
}

void Store(v1::Retention::Stub& stub, const std::vector<uint64_t>& ids) {
  std::vector<v1::EventBatch> batches(1);
  for (uint64_t id : ids) {
    if (batches.back().events_size() >= 1024) batches.emplace_back();
    *batches.back().add_events() = Event(id, true);
    *batches.back().add_events() = Event(id, false);
  }
  v1::ReportSummary summary;
  grpc::ClientContext ctx;
  auto w = stub.ReportEvents(&ctx, &summary);
  for (const auto& b : batches) w->Write(b);
  w->WritesDone();
  if (!w->Finish().ok() || summary.rejected() > 0) std::abort();
}

// A one-arm experiment: lru live, shadows lru and gdsf.
constexpr char kShadowsExperiment[] = "shadows";

Fixture* StartFixture(const std::string& policy) {
  auto* fx = new Fixture;
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_bench_XXXXXX").string();
  fx->dir = mkdtemp(tmpl.data());
  SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.data_dir = fx->dir;
  o.policy = policy;
  if (policy == "learned") {
    o.model_path = WriteRankBenchModel(fx->dir);
  }
  if (policy == kShadowsExperiment) {
    o.policy.clear();
    o.experiment_path = fx->dir + "/experiment.json";
    std::ofstream(o.experiment_path) << R"({"arms": [{"name": "live", "policy": "lru", "share": 1}],
               "shadows": [{"name": "lru", "policy": "lru"}, {"name": "gdsf", "policy": "gdsf"}]})";
  }
  fx->server = std::move(*SidecarServer::Start(o));
  fx->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(fx->server->port()),
                                    grpc::InsecureChannelCredentials());
  fx->stub = v1::Retention::NewStub(fx->channel);
  fx->health = grpc::health::v1::Health::NewStub(fx->channel);
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= kResident; ++id) ids.push_back(id);
  Store(*fx->stub, ids);
  fx->resident = ids;
  return fx;
}

Fixture& Shared() {
  static Fixture* f = StartFixture("lru");
  return *f;
}

Fixture& SharedLearned() {
  static Fixture* f = StartFixture("learned");
  return *f;
}

// Each row that ranks draws its victims from the pool it leaves behind, so
// the paired rows get sidecars of their own, starting from the same 40,000.
Fixture& PairedLru() {
  static Fixture* f = StartFixture("lru");
  return *f;
}

Fixture& PairedLearned() {
  static Fixture* f = StartFixture("learned");
  return *f;
}

Fixture& PairedShadows() {
  static Fixture* f = StartFixture(kShadowsExperiment);
  return *f;
}

// Runs `call` and appends its wall time in microseconds to `us`.
template <typename Call>
grpc::Status TimedUs(std::vector<double>& us, Call call) {
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status s = call();
  us.push_back(
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  return s;
}

void Report(benchmark::State& state, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  if (us.empty()) return;
  state.counters["p50_us"] = us[(us.size() - 1) / 2];
  state.counters["p99_us"] = us[static_cast<size_t>(0.99 * (us.size() - 1))];
}

void BM_EmptyCall(benchmark::State& state) {
  Fixture& f = Shared();
  std::vector<double> us;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status s = TimedUs(us, [&] { return f.health->Check(&ctx, req, &resp); });
    if (!s.ok()) state.SkipWithError("health Check failed");
  }
  Report(state, us);
}

// GetStatus: a kvlearn method that decides nothing, dispatched like
// RankEviction (gRPC's callback API).
void BM_GetStatusCall(benchmark::State& state) {
  Fixture& f = Shared();
  std::vector<double> us;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse resp;
    const grpc::Status s = TimedUs(us, [&] { return f.stub->GetStatus(&ctx, {}, &resp); });
    if (!s.ok()) state.SkipWithError("GetStatus failed");
  }
  Report(state, us);
}

// One timed RankEviction of 64 resident candidates; the victim leaves
// `f.resident`. False if the call failed.
bool RankOnce(Fixture& f, std::mt19937_64& rng, std::vector<double>& us) {
  const v1::RankRequest req = SampleCandidates(f.resident, rng);
  v1::RankResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = TimedUs(us, [&] { return f.stub->RankEviction(&ctx, req, &resp); });
  if (!s.ok() || resp.victims_size() != 1) return false;
  Forget(f.resident, resp.victims(0).block_id());
  return true;
}

// Ranks 64 distinct random resident blocks and frees one block's bytes: the
// sidecar evicts the first-ranked one in its view. The pool starts with
// kResident blocks and loses one per call; candidates are drawn from what is
// still resident, so every call ranks 64 real leaves. (Re-storing the victim
// between calls would put a ReportEvents stream on the same connection
// between timed calls, which inflates the next call's latency on loopback.)
void RankEviction64(benchmark::State& state, Fixture& f) {
  std::mt19937_64 rng(1);
  std::vector<double> us;
  for (auto _ : state) {
    if (!RankOnce(f, rng, us)) {
      state.SkipWithError("RankEviction failed");
      break;
    }
  }
  Report(state, us);
  // Server-side decision time (no transport), from /metrics.
  httplib::Client http("127.0.0.1", f.server->metrics_port());
  if (auto res = http.Get("/metrics")) {
    double sum = 0, count = 0;
    for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
      if (absl::ConsumePrefix(&line,
                              "kvlearn_decision_latency_seconds_sum{rpc=\"RankEviction\"} ")) {
        (void)absl::SimpleAtod(line, &sum);
      } else if (absl::ConsumePrefix(
                     &line, "kvlearn_decision_latency_seconds_count{rpc=\"RankEviction\"} ")) {
        (void)absl::SimpleAtod(line, &count);
      }
    }
    if (count > 0) state.counters["server_mean_us"] = 1e6 * sum / count;
  }
}

// An empty call just before each call of `timed` (which times one call into
// the vector it is given; false when it failed), so that both see the same
// moment of a noisy machine: p50_us and p50_empty_us are their medians,
// added_p50_us the difference (the issue's "over an empty call"),
// paired_p50_us the median of each pair's own difference.
template <typename Timed>
void OverEmpty(benchmark::State& state, Fixture& f, Timed timed) {
  std::vector<double> empty_us, call_us, paired_us;
  for (auto _ : state) {
    grpc::ClientContext health_ctx;
    grpc::health::v1::HealthCheckRequest check;
    grpc::health::v1::HealthCheckResponse checked;
    if (!TimedUs(empty_us, [&] { return f.health->Check(&health_ctx, check, &checked); }).ok()) {
      state.SkipWithError("health Check failed");
      break;
    }
    if (!timed(call_us)) {
      state.SkipWithError("the call failed");
      break;
    }
    paired_us.push_back(call_us.back() - empty_us.back());
  }
  if (call_us.empty()) return;
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
  };
  state.counters["p50_us"] = median(call_us);
  state.counters["p50_empty_us"] = median(empty_us);
  state.counters["added_p50_us"] = median(call_us) - median(empty_us);
  state.counters["paired_p50_us"] = median(paired_us);
}

void RankEvictionOverEmpty(benchmark::State& state, Fixture& f) {
  std::mt19937_64 rng(2);
  OverEmpty(state, f, [&](std::vector<double>& us) { return RankOnce(f, rng, us); });
}

// GetStatus beside the same empty call: a kvlearn method on the same
// callback API that decides and journals nothing, so its added_p50_us is
// what the transport alone adds, and RankEviction's beyond it is the
// sidecar's own work.
void BM_GetStatusOverEmpty(benchmark::State& state) {
  Fixture& f = PairedLru();
  OverEmpty(state, f, [&](std::vector<double>& us) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse resp;
    return TimedUs(us, [&] { return f.stub->GetStatus(&ctx, {}, &resp); }).ok();
  });
}

void BM_RankEviction64(benchmark::State& state) { RankEviction64(state, Shared()); }
void BM_RankEviction64OverEmpty(benchmark::State& state) {
  RankEvictionOverEmpty(state, PairedLru());
}
void BM_RankEviction64LearnedOverEmpty(benchmark::State& state) {
  RankEvictionOverEmpty(state, PairedLearned());
}
void BM_RankEviction64Learned(benchmark::State& state) { RankEviction64(state, SharedLearned()); }
void BM_RankEviction64ShadowsOverEmpty(benchmark::State& state) {
  RankEvictionOverEmpty(state, PairedShadows());
}

// The decision alone, in-process (no gRPC): NodePools::RankEviction with
// the same pool and candidate shape, under `policy`.
// Streams through 32 MiB, so the next call finds little of the pool's state
// in the L1 and L2 caches: as a sidecar call does, after the engine, the
// client and gRPC ran in between.
void EvictCaches() {
  // Read, not written: dirty lines would cost the timed call their write-back.
  static const std::vector<uint64_t> junk((32u << 20) / sizeof(uint64_t), 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < junk.size(); i += 8) sum += junk[i];
  benchmark::DoNotOptimize(sum);
}

struct InProcessSetup {
  bool journaled = false;  // each call also written to a real decision journal
  bool cold = false;       // caches evicted (untimed) before each call
};

void RankEviction64InProcess(benchmark::State& state, const std::string& policy,
                             InProcessSetup setup = {}) {
  NodePoolsOptions o;
  o.cost =
      std::make_shared<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  o.policy = policy;
  if (policy == "learned") {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_bench_XXXXXX").string();
    const std::string dir = mkdtemp(tmpl.data());
    auto model = LearnedModel::Load(WriteRankBenchModel(dir));
    if (!model.ok()) std::abort();
    o.model = *model;
    std::filesystem::remove_all(dir);
  }
  NodePools pools(o);
  std::vector<uint64_t> resident;
  for (uint64_t id = 1; id <= kResident; ++id) {
    if (!pools.Apply(Event(id, true)).ok() || !pools.Apply(Event(id, false)).ok()) std::abort();
    resident.push_back(id);
  }
  std::string log_dir;
  std::unique_ptr<EventLog> log;
  if (setup.journaled) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_bench_XXXXXX").string();
    log_dir = mkdtemp(tmpl.data());
    auto opened = EventLog::Open(log_dir, {});
    if (!opened.ok()) std::abort();
    log = std::move(*opened);
    pools.SetDecisionJournal([&log](std::string_view r) { return log->AppendDecision(r); });
  }
  std::mt19937_64 rng(1);
  for (auto _ : state) {
    v1::RankRequest req = SampleCandidates(resident, rng);
    if (setup.cold) {
      state.PauseTiming();
      EvictCaches();
      state.ResumeTiming();
    }
    auto resp = pools.RankEviction(req);
    if (!resp.ok() || resp->victims_size() != 1) std::abort();
    Forget(resident, resp->victims(0).block_id());
  }
  if (setup.journaled) {
    pools.SetDecisionJournal(nullptr);
    log.reset();
    std::filesystem::remove_all(log_dir);
  }
}
void BM_RankEviction64InProcess(benchmark::State& state) { RankEviction64InProcess(state, "lru"); }
void BM_RankEviction64InProcessLearned(benchmark::State& state) {
  RankEviction64InProcess(state, "learned");
}
void BM_RankEviction64InProcessJournaled(benchmark::State& state) {
  RankEviction64InProcess(state, "lru", {.journaled = true});
}
void BM_RankEviction64InProcessLearnedJournaled(benchmark::State& state) {
  RankEviction64InProcess(state, "learned", {.journaled = true});
}
void BM_RankEviction64InProcessCold(benchmark::State& state) {
  RankEviction64InProcess(state, "lru", {.journaled = true, .cold = true});
}
void BM_RankEviction64InProcessLearnedCold(benchmark::State& state) {
  RankEviction64InProcess(state, "learned", {.journaled = true, .cold = true});
}
// Cold without the journal: the difference from the rows above is what the
// journal's write costs cold.
void BM_RankEviction64InProcessColdUnjournaled(benchmark::State& state) {
  RankEviction64InProcess(state, "lru", {.cold = true});
}
void BM_RankEviction64InProcessLearnedColdUnjournaled(benchmark::State& state) {
  RankEviction64InProcess(state, "learned", {.cold = true});
}
// arc's ranking is also learned's while its ARC expert leads (this pool has
// no capacity, so the learned rows never evict and ARC never leads there).
void BM_RankEviction64InProcessArc(benchmark::State& state) {
  RankEviction64InProcess(state, "arc");
}

// Interleaved so both see the same machine state.
BENCHMARK(BM_EmptyCall)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_GetStatusCall)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_EmptyCall)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64Learned)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_EmptyCall)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_GetStatusOverEmpty)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64OverEmpty)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64LearnedOverEmpty)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64ShadowsOverEmpty)->Iterations(20000)->UseRealTime();
BENCHMARK(BM_RankEviction64InProcess)->Iterations(20000);
BENCHMARK(BM_RankEviction64InProcessLearned)->Iterations(20000);
BENCHMARK(BM_RankEviction64InProcessArc)->Iterations(20000);
BENCHMARK(BM_RankEviction64InProcessJournaled)->Iterations(20000);
BENCHMARK(BM_RankEviction64InProcessLearnedJournaled)->Iterations(20000);
BENCHMARK(BM_RankEviction64InProcessCold)->Iterations(5000);
BENCHMARK(BM_RankEviction64InProcessLearnedCold)->Iterations(5000);
BENCHMARK(BM_RankEviction64InProcessColdUnjournaled)->Iterations(5000);
BENCHMARK(BM_RankEviction64InProcessLearnedColdUnjournaled)->Iterations(5000);

}  // namespace
}  // namespace kvlearn

// As `kvlearn serve` (cli/main.cc): the sidecar runs with Abseil's
// lock-order check off, so the bench measures it that way.
int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
