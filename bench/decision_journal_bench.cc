// What journaling one decision costs the Admit / RankEviction call that makes
// it (server/event_log.h): the usual case, a copy into the staging file, and
// the rare one, a call that finds the staging full (about 170 decisions of
// 64 candidates with no event append in between) and first writes it all
// into RocksDB.
//
//   build/bench/decision_journal_bench
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/decision_staging.h"
#include "server/event_log.h"

namespace kvlearn {
namespace {

// About a 64-candidate RankEviction record (64 KiB holds ~170).
constexpr size_t kRecordBytes = 350;
const std::string kRecord(kRecordBytes, 'r');

struct TempLog {
  TempLog() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_bench_XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    auto opened = EventLog::Open(dir, {});
    if (!opened.ok()) std::abort();
    log = std::move(*opened);
  }
  ~TempLog() {
    log.reset();
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  std::unique_ptr<EventLog> log;
};

// Records of kRecord's size that fit in an empty staging file.
constexpr size_t kPerStaging = DecisionStaging::kDefaultCapacity / (kRecordBytes + 40);

void BM_AppendDecisionStaged(benchmark::State& state) {
  TempLog t;
  size_t staged = 0;
  for (auto _ : state) {
    if (++staged == kPerStaging) {  // keep every timed append a plain copy
      state.PauseTiming();
      const std::string event = "e";
      if (!t.log->Append({&event, 1}).ok()) std::abort();  // carries the staging away
      staged = 0;
      state.ResumeTiming();
    }
    if (!t.log->AppendDecision(kRecord).ok()) std::abort();
  }
}
BENCHMARK(BM_AppendDecisionStaged)->Iterations(20000);

// Appends 10 stagings' worth of decisions with no event append, timing each
// call: the median is the copy, the slowest calls are the ones that found
// the staging full and wrote it into RocksDB first.
void BM_AppendDecisionsWithoutEvents(benchmark::State& state) {
  TempLog t;
  std::vector<double> us;
  for (auto _ : state) {
    us.clear();
    for (size_t i = 0; i < 10 * kPerStaging; ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (!t.log->AppendDecision(kRecord).ok()) std::abort();
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[us.size() * 99 / 100];
  state.counters["max_us"] = us.back();
  // The ten slowest calls: one flush per staging.
  state.counters["slowest10_min_us"] = us[us.size() - 10];
  state.counters["slowest10_median_us"] = us[us.size() - 5];
}
BENCHMARK(BM_AppendDecisionsWithoutEvents)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
