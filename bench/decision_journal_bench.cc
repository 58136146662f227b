// What journaling one decision costs the Admit / RankEviction call that makes
// it (server/event_log.h): the usual case, a copy into the staging file, and
// a node that sends no events, whose decisions fill staging after staging
// (about 170 decisions of 64 candidates each): the drain thread writes each
// full one into RocksDB, and a call waits only when the other is full too.
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

// Appends 50 stagings' worth of decisions with no event append, one call
// every `spacing_us` µs (a busy wait; 0 = back to back), timing each call.
// The median is the copy; the slowest calls are those that waited for the
// drain thread's write (back to back, decisions outrun RocksDB) or that the
// drain thread's work on the other core slowed.
void BM_AppendDecisionsWithoutEvents(benchmark::State& state) {
  const auto spacing = std::chrono::microseconds(state.range(0));
  TempLog t;
  std::vector<double> us;
  for (auto _ : state) {
    us.clear();
    auto next = std::chrono::steady_clock::now();
    for (size_t i = 0; i < 50 * kPerStaging; ++i) {
      while (std::chrono::steady_clock::now() < next) {
      }
      const auto start = std::chrono::steady_clock::now();
      if (!t.log->AppendDecision(kRecord).ok()) std::abort();
      const auto end = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
      next = end + spacing;
    }
  }
  std::sort(us.begin(), us.end());
  const auto at = [&us](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  state.counters["p50_us"] = at(0.5);
  state.counters["p99_us"] = at(0.99);
  state.counters["p99.9_us"] = at(0.999);
  state.counters["max_us"] = us.back();
  // One full staging per ~170 calls: 50 in the run.
  state.counters["slowest50_median_us"] = us[us.size() - 25];
}
BENCHMARK(BM_AppendDecisionsWithoutEvents)
    ->Arg(0)
    ->Arg(5)
    ->Arg(20)
    ->ArgName("spacing_us")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
