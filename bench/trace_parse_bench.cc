// Throughput of the Mooncake JSONL reader on a generated chat trace (~200k
// requests, ~50 MB): ParseMooncakeTrace on bytes already in memory, and
// ReadMooncakeTrace from a file (page cache warm after the first iteration).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "benchmark/benchmark.h"
#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

// The trace is generated and written once per process; the file is removed at exit.
struct TraceFile {
  std::string path;
  std::string bytes;
  size_t requests = 0;

  TraceFile() {
    ChatWorkloadOptions options;
    options.requests = 200000;
    const Trace trace = GenerateChatTrace(options);
    requests = trace.requests.size();
    path = (std::filesystem::temp_directory_path() /
            ("kvlearn_trace_parse_bench_" + std::to_string(getpid()) + ".jsonl"))
               .string();
    if (absl::Status s = WriteMooncakeTrace(trace, path); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::abort();
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  ~TraceFile() { std::filesystem::remove(path); }
};

const TraceFile& GetTraceFile() {
  static const TraceFile file;  // destroyed, and the file removed, at exit
  return file;
}

void Report(benchmark::State& state, const TraceFile& file) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * file.bytes.size()));
  state.counters["requests/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * file.requests), benchmark::Counter::kIsRate);
}

void BM_ParseMooncakeTrace(benchmark::State& state) {
  const TraceFile& file = GetTraceFile();
  for (auto _ : state) {
    absl::StatusOr<Trace> trace = ParseMooncakeTrace(file.bytes, "bench", {});
    if (!trace.ok()) {
      state.SkipWithError(std::string(trace.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(trace->hash_ids.data());
  }
  Report(state, file);
}
BENCHMARK(BM_ParseMooncakeTrace)->Unit(benchmark::kMillisecond);

void BM_ReadMooncakeTrace(benchmark::State& state) {
  const TraceFile& file = GetTraceFile();
  for (auto _ : state) {
    absl::StatusOr<Trace> trace = ReadMooncakeTrace(file.path, {});
    if (!trace.ok()) {
      state.SkipWithError(std::string(trace.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(trace->hash_ids.data());
  }
  Report(state, file);
}
BENCHMARK(BM_ReadMooncakeTrace)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
