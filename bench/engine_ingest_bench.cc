// Decode throughput of engine KV event payloads (engine/kv_event_decoder.h):
// events/s ("items_per_second") and payload bytes/s, for both wire encodings
// and both hash types.
//
// The payloads are what an engine would publish for the shipped Mooncake
// trace: the first 2000 requests through an LRU prefix cache of 2000 blocks
// (engine/prefix_cache_engine.h), one batch per request, encoded by
// EncodeKvEventBatch. The last argument is the tokens per block written into
// token_ids: 16 is vLLM's default block size, 512 the trace's own (token_ids
// is most of a BlockStored payload, and the decoder only counts it).
//
//   build/bench/engine_ingest_bench --benchmark_min_time=1
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "datasets/mooncake_reader.h"
#include "engine/kv_event_decoder.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"

#ifndef KVLEARN_SOURCE_DIR
#define KVLEARN_SOURCE_DIR "."
#endif

namespace kvlearn {
namespace {

struct Corpus {
  std::vector<std::string> payloads;
  std::vector<size_t> events;  // per payload
};

Corpus MakeCorpus(KvEventEncoding encoding, KvHashEncoding hashes, uint32_t block_size) {
  Corpus corpus;
  const auto trace =
      ReadMooncakeTrace(KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl", {});
  if (!trace.ok()) return corpus;
  PrefixCacheEngine engine({.capacity_blocks = 2000, .block_size = block_size});
  const size_t n = std::min<size_t>(trace->requests.size(), 2000);
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace->requests[i];
    // input_length 0: every block holds block_size tokens.
    const EngineEventBatch batch = engine.Serve(trace->BlocksOf(r), 0, r.timestamp_ms / 1e3);
    if (batch.events.empty()) continue;
    corpus.payloads.push_back(EncodeKvEventBatch(batch, {encoding, hashes}));
    corpus.events.push_back(batch.events.size());
  }
  return corpus;
}

void BM_DecodeKvEventBatch(benchmark::State& state) {
  const auto encoding = static_cast<KvEventEncoding>(state.range(0));
  const auto hashes = static_cast<KvHashEncoding>(state.range(1));
  const auto block_size = static_cast<uint32_t>(state.range(2));
  const Corpus corpus = MakeCorpus(encoding, hashes, block_size);
  if (corpus.payloads.empty()) {
    state.SkipWithError("no trace at " KVLEARN_SOURCE_DIR "/datasets");
    return;
  }
  state.SetLabel(std::string(encoding == KvEventEncoding::kMap ? "map" : "array") + "/" +
                 (hashes == KvHashEncoding::kBytes ? "bytes" : "int") + "/" +
                 std::to_string(block_size) + "-token blocks");
  size_t i = 0;
  int64_t events = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    auto batch = DecodeKvEventBatch(corpus.payloads[i]);
    if (!batch.ok()) {
      state.SkipWithError("decode failed");
      return;
    }
    benchmark::DoNotOptimize(batch);
    events += static_cast<int64_t>(corpus.events[i]);
    bytes += static_cast<int64_t>(corpus.payloads[i].size());
    if (++i == corpus.payloads.size()) i = 0;
  }
  state.SetItemsProcessed(events);
  state.SetBytesProcessed(bytes);
  state.counters["payloads/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DecodeKvEventBatch)
    ->ArgNames({"map", "bytes", "block"})
    ->ArgsProduct({{static_cast<int64_t>(KvEventEncoding::kArray),
                    static_cast<int64_t>(KvEventEncoding::kMap)},
                   {static_cast<int64_t>(KvHashEncoding::kInt),
                    static_cast<int64_t>(KvHashEncoding::kBytes)},
                   {16, 512}});

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
