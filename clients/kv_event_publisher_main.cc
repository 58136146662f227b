// kvlearn-engine-publisher: replays a Mooncake JSONL trace as a vLLM/SGLang
// engine would publish its KV cache events, so that `kvlearn serve
// --engine-events` (or any subscriber of that wire format) can be exercised
// without a GPU. Each request goes through an LRU prefix cache of
// --capacity-blocks blocks (engine/prefix_cache_engine.h); the events of one
// request are one batch on the PUB socket; the ROUTER socket answers replay
// requests from a bounded buffer.
//
//   kvlearn-engine-publisher --trace datasets/mooncake_conversation_trace.jsonl
//     --endpoint tcp://*:5557 --replay-endpoint tcp://*:5558 --capacity-blocks 2048
//     --encoding map --hash-type bytes --drop-seq 10 --wait-subscribers 1
//
// With --step-stdin each request waits for one line on stdin, so that a
// client reporting the same requests' arrivals can keep in step.
//
// Prints a summary line, and with --print-resident the cached block ids at
// the end (one per line, ascending). Errors: one line on stderr, exit 1.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "kvlearn-engine-publisher: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvlearn;
  CLI::App app{
      "Replays a trace (Mooncake or Bailian JSONL) as an engine publishing KV cache events "
      "(vLLM/SGLang ZMQ wire format)."};
  std::string trace_path;
  size_t max_requests = 0;
  uint32_t block_size = 0;  // 0: the trace format's
  size_t capacity_blocks = 4096;
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint = "tcp://*:5558";
  std::string topic;
  std::string encoding = "array";
  std::string hash_type = "int";
  int64_t drop_seq = -1;
  size_t replay_buffer = 10000;
  double speed = 0;
  int64_t wait_subscribers = 0;
  int64_t wait_timeout_ms = 30000;
  int64_t linger_ms = 1000;
  bool print_resident = false;
  bool step_stdin = false;
  std::string medium = "GPU";
  int64_t dp_rank = -1;

  app.add_option("--trace", trace_path,
                 "trace to replay, Mooncake or Bailian JSONL (told apart by the first line)")
      ->required();
  app.add_option("--requests", max_requests, "replay only the first N requests (0 = all)");
  app.add_option("--block-size", block_size,
                 "tokens per block of the trace (default: the format's, 512 for Mooncake's, 16 "
                 "for Bailian's)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--capacity-blocks", capacity_blocks, "blocks the engine's prefix cache holds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--endpoint", endpoint, "PUB address to bind")->capture_default_str();
  app.add_option("--replay-endpoint", replay_endpoint, "ROUTER replay address to bind ('' = none)")
      ->capture_default_str();
  app.add_option("--topic", topic, "topic frame of every message");
  app.add_option("--encoding", encoding,
                 "array: tag-first arrays (SGLang, older vLLM); map: map events and batch (vLLM)")
      ->check(CLI::IsMember({"array", "map"}))
      ->capture_default_str();
  app.add_option("--hash-type", hash_type, "int: 64-bit integers; bytes: 32-byte strings")
      ->check(CLI::IsMember({"int", "bytes"}))
      ->capture_default_str();
  app.add_option("--drop-seq", drop_seq,
                 "number and keep this sequence but never send it on PUB (-1 = none)");
  app.add_option("--replay-buffer", replay_buffer, "batches kept for replay")
      ->capture_default_str();
  app.add_option("--speed", speed,
                 "trace time multiplier: 1 = the trace's own pace, 0 = as fast as possible")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--wait-subscribers", wait_subscribers,
                 "wait for this many subscriptions before publishing");
  app.add_option("--wait-timeout-ms", wait_timeout_ms, "give up waiting for subscribers")
      ->capture_default_str();
  app.add_option("--linger-ms", linger_ms, "keep answering replays this long after the last batch")
      ->capture_default_str();
  app.add_option("--medium", medium, "medium string sent with every event ('' = nil)")
      ->capture_default_str();
  app.add_option("--dp-rank", dp_rank, "data_parallel_rank sent with every batch (-1 = none)");
  app.add_flag("--print-resident", print_resident, "print the cached block ids at the end");
  app.add_flag("--step-stdin", step_stdin,
               "serve each request only after reading one line from stdin (stop at its end): "
               "lets a client that reports the requests' arrivals keep pace "
               "(clients/python/examples/replay_trace.py --follow-engine)");
  CLI11_PARSE(app, argc, argv);

  TraceReadOptions read_options;
  read_options.block_size = block_size;
  absl::StatusOr<Trace> trace = ReadMooncakeTrace(trace_path, read_options);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));

  PrefixCacheEngineOptions engine_options;
  engine_options.capacity_blocks = capacity_blocks;
  engine_options.block_size = trace->block_size;
  engine_options.medium = medium.empty() ? KvMedium::kUnspecified : ParseKvMedium(medium);
  PrefixCacheEngine engine(engine_options);

  KvEventEncodeOptions encode;
  encode.encoding = encoding == "map" ? KvEventEncoding::kMap : KvEventEncoding::kArray;
  encode.hashes = hash_type == "bytes" ? KvHashEncoding::kBytes : KvHashEncoding::kInt;

  EnginePublisherOptions publisher_options;
  publisher_options.endpoint = endpoint;
  publisher_options.replay_endpoint = replay_endpoint;
  publisher_options.topic = topic;
  publisher_options.replay_buffer_batches = replay_buffer;
  if (drop_seq >= 0) publisher_options.drop_sequence = static_cast<uint64_t>(drop_seq);
  absl::StatusOr<std::unique_ptr<EnginePublisher>> publisher =
      EnginePublisher::Start(publisher_options);
  if (!publisher.ok()) return Fail(std::string(publisher.status().message()));
  std::fprintf(
      stderr, "publishing on %s, replay on %s\n", (*publisher)->endpoint().c_str(),
      (*publisher)->replay_endpoint().empty() ? "(none)" : (*publisher)->replay_endpoint().c_str());
  if (wait_subscribers > 0 &&
      !(*publisher)
           ->WaitForSubscribers(wait_subscribers, std::chrono::milliseconds(wait_timeout_ms))) {
    return Fail("timed out waiting for " + std::to_string(wait_subscribers) + " subscriber(s)");
  }

  const size_t n =
      max_requests == 0 ? trace->requests.size() : std::min(max_requests, trace->requests.size());
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_ms = n > 0 ? trace->requests[0].timestamp_ms : 0;
  uint64_t batches = 0;
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace->requests[i];
    if (step_stdin) {
      int c;
      while ((c = std::getchar()) != EOF && c != '\n') {
      }
      if (c == EOF) break;
    }
    if (speed > 0) {
      const auto due = start + std::chrono::microseconds(static_cast<int64_t>(
                                   (r.timestamp_ms - first_ms) * 1000.0 / speed));
      std::this_thread::sleep_until(due);
    }
    EngineEventBatch batch =
        engine.Serve(trace->BlocksOf(r), r.input_length, static_cast<double>(r.timestamp_ms) / 1e3);
    if (batch.events.empty()) continue;  // a full hit changes nothing: engines send no batch
    if (dp_rank >= 0) batch.data_parallel_rank = dp_rank;
    (*publisher)->Publish(EncodeKvEventBatch(batch, encode));
    ++batches;
  }
  (*publisher)->Flush();
  if (linger_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(linger_ms));
  const EnginePublisherStats ps = (*publisher)->stats();
  (*publisher)->Stop();

  const PrefixCacheEngineStats& es = engine.stats();
  std::printf(
      "requests %zu, batches %llu (sequences 0..%lld, dropped %llu), stored %llu, evicted %llu, "
      "hit %llu, uncached %llu blocks; replay requests %llu (%llu batches); resident %zu "
      "blocks\n",
      n, static_cast<unsigned long long>(batches), static_cast<long long>(batches) - 1,
      static_cast<unsigned long long>(ps.dropped),
      static_cast<unsigned long long>(es.stored_blocks),
      static_cast<unsigned long long>(es.evicted_blocks),
      static_cast<unsigned long long>(es.hit_blocks),
      static_cast<unsigned long long>(es.uncached_blocks),
      static_cast<unsigned long long>(ps.replay_requests),
      static_cast<unsigned long long>(ps.replayed_batches), engine.resident_blocks());
  if (print_resident) {
    for (const uint64_t id : engine.ResidentBlocks()) {
      std::printf("%llu\n", static_cast<unsigned long long>(id));
    }
  }
  return 0;
}
