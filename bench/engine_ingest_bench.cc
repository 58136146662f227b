// Engine KV event ingestion (docs/engine_events.md, docs/performance.md):
//
//   BM_Decode         one payload -> EngineEventBatch, by the skipping decoder
//                     (engine/kv_event_decoder.h) or, for comparison, by the
//                     msgpack-cxx decoder it replaced (kept in tests/engine/).
//   BM_IngestPath     decode, map to kvlearn events, NodePools::Apply, RocksDB
//                     event log append (WAL on, no fsync: `kvlearn serve`'s
//                     default), through EngineIngest either on the caller's
//                     thread with one log write per payload (the old path) or
//                     pipelined onto its apply thread with one write per group.
//   BM_ZmqToLog       the same behind real ZMQ sockets: EnginePublisher ->
//                     EngineSubscriber -> EngineIngest, all in this process.
//
// The payloads are what an engine would publish for the shipped Mooncake
// trace: the first 2000 requests through an LRU prefix cache of 2000 blocks
// (engine/prefix_cache_engine.h), one batch per request (BlockRemoved, then
// BlockStored), encoded by EncodeKvEventBatch. Arguments: `block` is the
// tokens per block written into token_ids (16 is vLLM's default block size,
// 512 the trace's own); `vocab` 0 writes token ids as zeros (one byte each),
// 128256 as ids of Llama 3's vocabulary (1, 2, 3 or 5 bytes each, as a real
// engine sends them). The ingest benchmarks replay the corpus in cycles, each
// starting with an AllBlocksCleared so the pools start empty again.
//
// Rates: items_per_second is engine events (BlockStored / BlockRemoved /
// AllBlocksCleared); "blocks/s" is the kvlearn events they become (one per
// block hash), which is what the pools apply and the log stores.
//
//   build/bench/engine_ingest_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/engine_subscriber.h"
#include "engine/kv_event_decoder.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"
#include "server/engine_ingest.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/sidecar_metrics.h"
#include "tests/engine/msgpack_cxx_kv_event_decoder.h"

#ifndef KVLEARN_SOURCE_DIR
#define KVLEARN_SOURCE_DIR "."
#endif

namespace kvlearn {
namespace {

constexpr uint32_t kLlama3Vocab = 128256;

struct Corpus {
  std::vector<std::string> payloads;  // [0] is AllBlocksCleared
  int64_t events = 0;                 // engine events, all payloads
  int64_t blocks = 0;                 // kvlearn events they map to
  int64_t bytes = 0;
};

// Two shapes of stream. Requests: one batch per request, its BlockRemoved
// then its BlockStored with the whole new chain (about 26 blocks per event on
// this trace), as a prefill-only engine sends them. Steps: every block its
// own event and 64 events per batch, as vLLM sends them while decoding (a
// request fills one block every block_size tokens, and one scheduler step
// publishes the events of every running request together).
enum Shape : int64_t { kRequests = 0, kSteps = 1 };

Corpus MakeCorpus(KvEventEncoding encoding, KvHashEncoding hashes, uint32_t block_size,
                  uint32_t vocab, Shape shape = kRequests) {
  Corpus corpus;
  const auto trace =
      ReadMooncakeTrace(KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl", {});
  if (!trace.ok()) return corpus;
  const KvEventEncodeOptions encode{encoding, hashes, vocab};
  PrefixCacheEngine engine({.capacity_blocks = 2000, .block_size = block_size});
  const auto add = [&](const EngineEventBatch& batch) {
    corpus.payloads.push_back(EncodeKvEventBatch(batch, encode));
    corpus.bytes += static_cast<int64_t>(corpus.payloads.back().size());
    corpus.events += static_cast<int64_t>(batch.events.size());
    for (const EngineEvent& e : batch.events) {
      if (const auto* s = std::get_if<BlockStoredEvent>(&e)) {
        corpus.blocks += static_cast<int64_t>(s->block_hashes.size());
      } else if (const auto* r = std::get_if<BlockRemovedEvent>(&e)) {
        corpus.blocks += static_cast<int64_t>(r->block_hashes.size());
      }
    }
  };
  add(engine.Clear(0));
  EngineEventBatch step;
  const auto add_to_step = [&](EngineEvent e) {
    step.events.push_back(std::move(e));
    if (step.events.size() == 64) {
      add(step);
      step.events.clear();
    }
  };
  const size_t n = std::min<size_t>(trace->requests.size(), 2000);
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace->requests[i];
    // input_length 0: every block holds block_size tokens.
    const EngineEventBatch batch = engine.Serve(trace->BlocksOf(r), 0, r.timestamp_ms / 1e3);
    if (batch.events.empty()) continue;
    if (shape == kRequests) {
      add(batch);
      continue;
    }
    step.ts = batch.ts;
    for (const EngineEvent& e : batch.events) {
      if (const auto* removed = std::get_if<BlockRemovedEvent>(&e)) {
        for (const uint64_t h : removed->block_hashes) {
          BlockRemovedEvent one = *removed;
          one.block_hashes = {h};
          add_to_step(one);
        }
      } else if (const auto* stored = std::get_if<BlockStoredEvent>(&e)) {
        std::optional<uint64_t> parent = stored->parent_block_hash;
        for (const uint64_t h : stored->block_hashes) {
          BlockStoredEvent one = *stored;
          one.block_hashes = {h};
          one.parent_block_hash = parent;
          one.num_token_ids = stored->tokens_per_block;
          add_to_step(one);
          parent = h;
        }
      }
    }
  }
  if (!step.events.empty()) add(step);
  return corpus;
}

std::string Label(KvEventEncoding encoding, KvHashEncoding hashes, int64_t block, int64_t vocab,
                  Shape shape = kRequests) {
  return std::string(shape == kSteps ? "steps of 1-block events/" : "") +
         (encoding == KvEventEncoding::kMap ? "map" : "array") + "/" +
         (hashes == KvHashEncoding::kBytes ? "bytes" : "int") + "/" + std::to_string(block) +
         "-token blocks/" + (vocab == 0 ? "zero" : "llama3") + " token ids";
}

void SetRates(benchmark::State& state, int64_t events, int64_t blocks, int64_t bytes) {
  state.SetItemsProcessed(events);
  state.SetBytesProcessed(bytes);
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Args: decoder (0 skipping, 1 msgpack-cxx), map, bytes, block, vocab, shape.
void BM_Decode(benchmark::State& state) {
  const bool reference = state.range(0) == 1;
  const auto encoding = static_cast<KvEventEncoding>(state.range(1));
  const auto hashes = static_cast<KvHashEncoding>(state.range(2));
  const auto block = static_cast<uint32_t>(state.range(3));
  const auto vocab = static_cast<uint32_t>(state.range(4));
  const auto shape = static_cast<Shape>(state.range(5));
  const Corpus corpus = MakeCorpus(encoding, hashes, block, vocab, shape);
  if (corpus.payloads.size() < 2) {
    state.SkipWithError("no trace at " KVLEARN_SOURCE_DIR "/datasets");
    return;
  }
  state.SetLabel(std::string(reference ? "msgpack-cxx " : "skipping ") +
                 Label(encoding, hashes, block, vocab, shape));
  EngineEventBatch batch;
  int64_t cycles = 0;
  for (auto _ : state) {
    for (const std::string& payload : corpus.payloads) {
      bool ok;
      if (reference) {
        auto decoded = DecodeKvEventBatchWithMsgpackCxx(Bytes(payload));
        ok = decoded.ok();
        benchmark::DoNotOptimize(decoded);
      } else {
        ok = DecodeKvEventBatch(Bytes(payload), {}, &batch).ok();
        benchmark::DoNotOptimize(batch);
      }
      if (!ok) {
        state.SkipWithError("decode failed");
        return;
      }
    }
    ++cycles;
  }
  SetRates(state, cycles * corpus.events, cycles * corpus.blocks, cycles * corpus.bytes);
}

BENCHMARK(BM_Decode)
    ->ArgNames({"msgpack_cxx", "map", "bytes", "block", "vocab", "steps"})
    ->ArgsProduct({{0},
                   {static_cast<int64_t>(KvEventEncoding::kArray),
                    static_cast<int64_t>(KvEventEncoding::kMap)},
                   {static_cast<int64_t>(KvHashEncoding::kInt),
                    static_cast<int64_t>(KvHashEncoding::kBytes)},
                   {16, 512},
                   {0, kLlama3Vocab},
                   {kRequests}})
    ->ArgsProduct({{0, 1},
                   {static_cast<int64_t>(KvEventEncoding::kMap)},
                   {static_cast<int64_t>(KvHashEncoding::kBytes)},
                   {16},
                   {kLlama3Vocab},
                   {kSteps}})
    ->ArgsProduct({{1},
                   {static_cast<int64_t>(KvEventEncoding::kMap)},
                   {static_cast<int64_t>(KvHashEncoding::kBytes)},
                   {16, 512},
                   {0, kLlama3Vocab},
                   {kRequests}})
    ->Unit(benchmark::kMillisecond);

// The sidecar's side of ingestion: pools (lru, unbounded) and a durable log
// in a fresh directory.
struct Sidecar {
  std::string dir;
  std::unique_ptr<EventLog> log;
  std::unique_ptr<NodePools> pools;
  std::unique_ptr<SidecarMetrics> metrics;
  std::shared_ptr<const CostModel> cost;

  bool Open() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kvlearn_engine_ingest_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return false;
    dir = tmpl;
    auto opened = EventLog::Open(dir, {});
    if (!opened.ok()) return false;
    log = *std::move(opened);
    cost =
        std::make_shared<CostModel>(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
    NodePoolsOptions o;
    o.policy = "lru";
    o.cost = cost;
    pools = std::make_unique<NodePools>(o);
    metrics = std::make_unique<SidecarMetrics>();
    return true;
  }
  ~Sidecar() {
    log.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

bool Ready(benchmark::State& state, const Corpus& corpus, Sidecar& sidecar) {
  if (corpus.payloads.size() >= 2 && sidecar.Open()) return true;
  state.SkipWithError("no trace, or no event log");
  return false;
}

// Args: pipelined (0: caller's thread, one write per payload; 1: apply
// thread, one write per group), shape, block, vocab. vLLM's encoding (map,
// bytes). CPU time is the whole process's (both threads, RocksDB's too).
void BM_IngestPath(benchmark::State& state) {
  const bool pipelined = state.range(0) == 1;
  const auto shape = static_cast<Shape>(state.range(1));
  const auto block = static_cast<uint32_t>(state.range(2));
  const auto vocab = static_cast<uint32_t>(state.range(3));
  const Corpus corpus =
      MakeCorpus(KvEventEncoding::kMap, KvHashEncoding::kBytes, block, vocab, shape);
  Sidecar sidecar;
  if (!Ready(state, corpus, sidecar)) return;
  state.SetLabel(std::string(pipelined ? "pipelined " : "one thread ") +
                 Label(KvEventEncoding::kMap, KvHashEncoding::kBytes, block, vocab, shape));
  EngineIngest ingest(sidecar.pools.get(), sidecar.log.get(), sidecar.metrics.get(),
                      {.block_size = block, .cost = sidecar.cost.get()},
                      {.apply_thread = pipelined});
  const std::string node = "engine-0";
  uint64_t seq = 0;
  int64_t cycles = 0;
  EngineEventBatch batch;  // decoded into, then handed over, as the subscriber does
  for (auto _ : state) {
    for (const std::string& payload : corpus.payloads) {
      if (!DecodeKvEventBatch(Bytes(payload), {}, &batch).ok()) {
        state.SkipWithError("decode failed");
        return;
      }
      ingest.OnBatch(node, seq++, &batch);
    }
    ingest.Flush();
    ++cycles;
  }
  if (ingest.rejected() > 0) state.SkipWithError(ingest.last_rejection().c_str());
  SetRates(state, cycles * corpus.events, cycles * corpus.blocks, cycles * corpus.bytes);
  state.counters["log_writes/s"] =
      benchmark::Counter(static_cast<double>(ingest.log_writes()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_IngestPath)
    ->ArgNames({"pipelined", "steps", "block", "vocab"})
    ->ArgsProduct({{0, 1}, {kRequests, kSteps}, {16}, {kLlama3Vocab}})
    ->Args({1, kRequests, 512, kLlama3Vocab})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// Args: shape, block, vocab. vLLM's encoding, pipelined ingest.
void BM_ZmqToLog(benchmark::State& state) {
  const auto shape = static_cast<Shape>(state.range(0));
  const auto block = static_cast<uint32_t>(state.range(1));
  const auto vocab = static_cast<uint32_t>(state.range(2));
  const Corpus corpus =
      MakeCorpus(KvEventEncoding::kMap, KvHashEncoding::kBytes, block, vocab, shape);
  Sidecar sidecar;
  if (!Ready(state, corpus, sidecar)) return;
  state.SetLabel(Label(KvEventEncoding::kMap, KvHashEncoding::kBytes, block, vocab, shape));
  auto publisher = EnginePublisher::Start({});
  if (!publisher.ok()) {
    state.SkipWithError("publisher did not start");
    return;
  }
  EngineIngest ingest(sidecar.pools.get(), sidecar.log.get(), sidecar.metrics.get(),
                      {.block_size = block, .cost = sidecar.cost.get()});
  EngineSubscriberOptions so;
  so.endpoints = {{"engine-0", (*publisher)->endpoint(), ""}};
  auto subscriber = EngineSubscriber::Start(
      so, [&ingest](const std::string& node, uint64_t seq, EngineEventBatch& batch) {
        ingest.OnBatch(node, seq, &batch);
      });
  if (!subscriber.ok() || !(*publisher)->WaitForSubscribers(1, std::chrono::seconds(30))) {
    state.SkipWithError("subscriber did not join");
    return;
  }
  const auto delivered = [&] {
    const EngineEndpointStats s = (*subscriber)->Stats()[0];
    return s.batches + s.malformed + s.sequences_lost;
  };
  uint64_t expected = 0;
  int64_t cycles = 0;
  for (auto _ : state) {
    for (const std::string& payload : corpus.payloads) (*publisher)->Publish(payload);
    expected += corpus.payloads.size();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (delivered() < expected && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ingest.Flush();
    ++cycles;
  }
  (*subscriber)->Stop();
  ingest.Stop();
  const EngineEndpointStats s = (*subscriber)->Stats()[0];
  if (s.batches != expected || ingest.rejected() > 0) {
    state.SkipWithError("lost or refused batches");
  }
  SetRates(state, cycles * corpus.events, cycles * corpus.blocks, cycles * corpus.bytes);
}

BENCHMARK(BM_ZmqToLog)
    ->ArgNames({"steps", "block", "vocab"})
    ->ArgsProduct({{kRequests, kSteps}, {16}, {kLlama3Vocab}})
    ->Args({kRequests, 512, kLlama3Vocab})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
