// Engine KV events into the sidecar: the mapping to kvlearn events on a batch
// worked out by hand, and end to end, an engine replaying the shipped trace
// over real ZMQ sockets (one batch dropped, so the sidecar must replay it)
// leaves the sidecar's pool for that engine holding exactly the engine's
// resident set.
#include "server/engine_ingest.h"

#include <gtest/gtest.h>

#include <chrono>

#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/sidecar_metrics.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";

// A 3-block chain stored on the CPU under parent 7 becomes three DRAM
// block_stored events chained 7 -> 1 -> 2 -> 3; a GPU removal of 3 one HBM
// block_removed; a group-1 event is skipped; AllBlocksCleared clears the one
// tier stored to so far (DRAM).
TEST(EngineMappingTest, BatchWorkedOutByHand) {
  const CostModel cost = DefaultCost();
  EngineEventBatch batch;
  batch.ts = 12.5;
  BlockStoredEvent stored;
  stored.block_hashes = {1, 2, 3};
  stored.parent_block_hash = 7;
  stored.tokens_per_block = 16;
  stored.medium = KvMedium::kCpu;
  batch.events.push_back(stored);
  BlockRemovedEvent removed;
  removed.block_hashes = {3};
  removed.medium = KvMedium::kGpu;
  batch.events.push_back(removed);
  BlockStoredEvent other_group = stored;
  other_group.group_idx = 1;
  batch.events.push_back(other_group);
  batch.events.push_back(AllBlocksClearedEvent{});

  absl::flat_hash_set<int> tiers;
  std::vector<v1::Event> out;
  const uint32_t skipped =
      ToKvlearnEvents("e1", batch, {.block_size = 512, .cost = &cost}, tiers, out);
  EXPECT_EQ(skipped, 1u);
  ASSERT_EQ(out.size(), 5u);
  const uint64_t parents[] = {7, 1, 2};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(out[i].node_id(), "e1");
    EXPECT_EQ(out[i].tier(), v1::TIER_DRAM);
    EXPECT_EQ(out[i].timestamp_us(), 12'500'000);
    ASSERT_TRUE(out[i].has_block_stored());
    EXPECT_EQ(out[i].block_stored().block_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(out[i].block_stored().parent_id(), parents[i]);
    EXPECT_EQ(out[i].block_stored().tokens(), 16);
    EXPECT_EQ(out[i].block_stored().bytes(), static_cast<int64_t>(cost.BytesForTokens(16)));
  }
  EXPECT_EQ(out[3].tier(), v1::TIER_HBM);
  EXPECT_EQ(out[3].block_removed().block_id(), 3u);
  EXPECT_TRUE(out[4].has_all_blocks_cleared());
  EXPECT_EQ(out[4].tier(), v1::TIER_DRAM);
}

TEST(EngineMappingTest, AnEngineThatSendsNoBlockSizeGetsTheSidecarsAndARestartClears) {
  const CostModel cost = DefaultCost();
  EngineEventBatch batch;
  batch.engine_restarted = true;
  BlockStoredEvent stored;
  stored.block_hashes = {5};
  batch.events.push_back(stored);
  absl::flat_hash_set<int> tiers = {v1::TIER_HBM};
  std::vector<v1::Event> out;
  ToKvlearnEvents("e1", batch, {.block_size = 64, .cost = &cost}, tiers, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].has_all_blocks_cleared());  // before the new stores
  EXPECT_EQ(out[1].block_stored().tokens(), 64);
  EXPECT_FALSE(out[1].block_stored().has_parent_id());
}

// The batches an engine sends for the first `n` requests of the shipped
// trace through a 200-block cache (stores and removals).
std::vector<EngineEventBatch> EngineBatches(size_t n) {
  const auto trace = ReadMooncakeTrace(kShippedTrace, {});
  std::vector<EngineEventBatch> out;
  if (!trace.ok()) return out;
  PrefixCacheEngine engine({.capacity_blocks = 200, .block_size = 512});
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace->requests[i];
    EngineEventBatch b = engine.Serve(trace->BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
    if (!b.events.empty()) out.push_back(std::move(b));
  }
  return out;
}

// Pools, a durable log and an EngineIngest over them, in a fresh directory.
struct IngestUnderTest {
  explicit IngestUnderTest(EngineIngestOptions options) {
    auto opened = EventLog::Open(dir.path(), {});
    EXPECT_TRUE(opened.ok()) << opened.status();
    log = *std::move(opened);
    NodePoolsOptions o;
    o.cost = std::make_shared<CostModel>(DefaultCost());
    pools = std::make_unique<NodePools>(o);
    ingest = std::make_unique<EngineIngest>(
        pools.get(), log.get(), &metrics, EngineMapping{.block_size = 512, .cost = &DefaultCost()},
        options);
  }
  std::vector<std::string> Logged() const {
    std::vector<std::string> out;
    EXPECT_TRUE(log->ForEach([&out](uint64_t, std::string_view v) {
                     out.emplace_back(v);
                     return absl::OkStatus();
                   })
                    .ok());
    return out;
  }

  TempDir dir;
  std::unique_ptr<EventLog> log;
  std::unique_ptr<NodePools> pools;
  SidecarMetrics metrics;
  std::unique_ptr<EngineIngest> ingest;
};

// The apply thread groups batches into fewer log writes (and hands applied
// batches back for reuse), but the log it leaves holds the same events in the
// same order as applying and writing each batch on the caller's thread, and
// the pools refuse nothing either way.
TEST(EngineIngestPipelineTest, GroupedWritesLogWhatOneWritePerBatchLogs) {
  const std::vector<EngineEventBatch> batches = EngineBatches(400);
  ASSERT_GT(batches.size(), 100u);
  IngestUnderTest inline_path({.apply_thread = false});
  IngestUnderTest pipelined({.apply_thread = true, .max_queued_batches = 16});
  EngineEventBatch handed_back;  // as the subscriber does: reuse what comes back
  for (size_t i = 0; i < batches.size(); ++i) {
    inline_path.ingest->OnBatch("engine-a", i, batches[i]);
    handed_back = batches[i];
    pipelined.ingest->OnBatch("engine-a", i, &handed_back);
  }
  pipelined.ingest->Flush();
  EXPECT_EQ(inline_path.ingest->rejected(), 0u) << inline_path.ingest->last_rejection();
  EXPECT_EQ(pipelined.ingest->rejected(), 0u) << pipelined.ingest->last_rejection();
  EXPECT_EQ(inline_path.ingest->log_writes(), batches.size());
  EXPECT_LE(pipelined.ingest->log_writes(), batches.size());
  EXPECT_EQ(pipelined.ingest->applied(), inline_path.ingest->applied());
  const std::vector<std::string> logged = inline_path.Logged();
  EXPECT_EQ(logged.size(), inline_path.ingest->applied());
  EXPECT_TRUE(pipelined.Logged() == logged);
}

// Stop applies and logs everything queued before it returns; a batch after
// Stop is applied on the caller's thread.
TEST(EngineIngestPipelineTest, StopDrainsTheQueue) {
  const std::vector<EngineEventBatch> batches = EngineBatches(100);
  ASSERT_GT(batches.size(), 10u);
  IngestUnderTest pipelined({.apply_thread = true});
  uint64_t kvlearn_events = 0;
  absl::flat_hash_set<int> tiers;
  const CostModel& cost = DefaultCost();
  for (size_t i = 0; i < batches.size(); ++i) {
    std::vector<v1::Event> mapped;
    ToKvlearnEvents("engine-a", batches[i], {.block_size = 512, .cost = &cost}, tiers, mapped);
    kvlearn_events += mapped.size();
    if (i + 1 < batches.size()) pipelined.ingest->OnBatch("engine-a", i, batches[i]);
  }
  pipelined.ingest->Stop();
  pipelined.ingest->OnBatch("engine-a", batches.size() - 1, batches.back());
  EXPECT_EQ(pipelined.ingest->rejected(), 0u) << pipelined.ingest->last_rejection();
  EXPECT_EQ(pipelined.ingest->applied(), kvlearn_events);
  EXPECT_EQ(pipelined.log->next_sequence(), kvlearn_events);
}

// Every log write records each engine's last batch in it, in the same
// RocksDB write: two engines' streams interleaved, numbered differently, are
// read back per node after a reopen; the events' readers see events only.
TEST(EngineIngestPipelineTest, EachWriteRecordsEveryEnginesLastSequence) {
  const std::vector<EngineEventBatch> batches = EngineBatches(100);
  ASSERT_GT(batches.size(), 20u);
  const size_t b_batches = batches.size() / 2;
  IngestUnderTest t({.apply_thread = true, .max_queued_batches = 8});
  for (size_t i = 0; i < batches.size(); ++i) {
    t.ingest->OnBatch("engine-a", i, batches[i]);
    if (i < b_batches) t.ingest->OnBatch("engine-b", 500 + i, batches[i]);
  }
  t.ingest->Stop();
  EXPECT_EQ(t.ingest->rejected(), 0u) << t.ingest->last_rejection();
  ASSERT_GT(t.ingest->log_writes(), 1u);
  const uint64_t applied = t.ingest->applied();
  t.ingest.reset();
  t.log.reset();

  auto log = EventLog::Open(t.dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->LoggedEngineSequence("engine-a").value_or(0), batches.size() - 1);
  EXPECT_EQ((*log)->LoggedEngineSequence("engine-b").value_or(0), 500 + b_batches - 1);
  EXPECT_EQ((*log)->LoggedEngineSequence("engine-c").status().code(), absl::StatusCode::kNotFound);
  uint64_t events = 0;
  v1::Event e;
  ASSERT_TRUE((*log)
                  ->ForEach([&](uint64_t, std::string_view v) {
                    ++events;
                    EXPECT_TRUE(e.ParseFromArray(v.data(), static_cast<int>(v.size())));
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(events, applied);
  EXPECT_EQ((*log)->next_sequence(), applied);
}

TEST(EngineIngestPipelineTest, FramedAppendRefusesRecordsThatAreNotTheCountGiven) {
  TempDir dir;
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  const std::string two = std::string(
      "\x0a\x01"
      "a"
      "\x0a\x02"
      "bc",
      7);
  EXPECT_EQ((*log)->AppendFramed(two, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*log)->AppendFramed(two.substr(0, 6), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*log)->AppendFramed(two, 2).ok());
  std::vector<std::string> logged;
  ASSERT_TRUE((*log)
                  ->ForEach([&logged](uint64_t, std::string_view v) {
                    logged.emplace_back(v);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(logged, (std::vector<std::string>{"a", "bc"}));
}

class EngineIngestEndToEnd : public ::testing::TestWithParam<KvEventEncoding> {};

TEST_P(EngineIngestEndToEnd, TheSidecarHoldsTheEnginesResidentSet) {
  const auto trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EnginePublisherOptions po;
  po.replay_endpoint = "tcp://127.0.0.1:*";
  po.drop_sequence = 5;
  auto publisher = EnginePublisher::Start(po);
  ASSERT_TRUE(publisher.ok()) << publisher.status();

  TempDir dir;
  SidecarOptions o = TestOptions(dir.path(), "lru");
  o.metrics_listen = "";
  o.engine_events = "engine-a=" + (*publisher)->endpoint();
  o.engine_replay = (*publisher)->replay_endpoint();
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE((*publisher)->WaitForSubscribers(1, std::chrono::seconds(120)));

  PrefixCacheEngine engine({.capacity_blocks = 200, .block_size = 512});
  uint64_t kvlearn_events = 0;
  for (size_t i = 0; i < 300; ++i) {
    const TraceRequest& r = trace->requests[i];
    const EngineEventBatch batch =
        engine.Serve(trace->BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
    if (batch.events.empty()) continue;
    for (const EngineEvent& e : batch.events) {
      if (const auto* s = std::get_if<BlockStoredEvent>(&e))
        kvlearn_events += s->block_hashes.size();
      if (const auto* d = std::get_if<BlockRemovedEvent>(&e))
        kvlearn_events += d->block_hashes.size();
    }
    KvEventEncodeOptions encode;
    encode.encoding = GetParam();
    (*publisher)->Publish(EncodeKvEventBatch(batch, encode));
  }
  ASSERT_GT(engine.stats().evicted_blocks, 0u);
  ASSERT_TRUE(WaitUntil([&] {
    return server->engine_events_applied() + server->engine_events_rejected() >= kvlearn_events;
  })) << server->engine_events_applied()
      << " of " << kvlearn_events;
  EXPECT_EQ(server->engine_events_rejected(), 0u);
  EXPECT_EQ(server->engine_events_applied(), kvlearn_events);

  // One pool, the engine's GPU tier, holding exactly the engine's blocks.
  auto stub = Connect(server->port());
  {
    grpc::ClientContext ctx;
    v1::GetStatusResponse status;
    ASSERT_TRUE(stub->GetStatus(&ctx, {}, &status).ok());
    EXPECT_EQ(status.pools_size(), 1);
  }
  ExpectPoolHolds(*stub, "engine-a", v1::TIER_HBM, engine.ResidentBlocks());
}

INSTANTIATE_TEST_SUITE_P(BothEncodings, EngineIngestEndToEnd,
                         ::testing::Values(KvEventEncoding::kArray, KvEventEncoding::kMap),
                         [](const auto& info) {
                           return info.param == KvEventEncoding::kArray ? std::string("array")
                                                                        : std::string("map");
                         });

}  // namespace
}  // namespace kvlearn
