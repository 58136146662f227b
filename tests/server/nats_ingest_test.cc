// `kvlearn serve --nats` against a real nats-server (JetStream) started by
// the test on a free port: block events published to the stream reach the
// same pools as the same events sent over gRPC ReportEvents; a kill -9 of the
// sidecar mid-stream and its restart apply every published event exactly
// once; a stop and restart of nats-server mid-stream loses nothing and the
// sidecar resumes without a restart of its own.
//
// The events: two engines (PrefixCacheEngine) serving alternate requests of
// the shipped trace, their stores and removals mapped as engine_ingest does,
// one EventBatch per engine batch. No assertion depends on time: waits poll
// a condition with a generous limit (WaitUntil).
#include "server/nats_ingest.h"

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <atomic>
#include <csignal>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"
#include "server/engine_bridge.h"
#include "server/engine_ingest.h"
#include "server/jetstream_connection.h"
#include "tests/server/nats_server_process.h"
#include "tests/server/restart_compare.h"
#include "tests/server/serve_process.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/server/stream_publisher.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";
constexpr char kPrefix[] = "kvlearn.events";
const char* const kEngines[] = {"engine-a", "engine-b"};

struct Published {
  std::string node;
  v1::EventBatch batch;
};

// The events of two engines serving alternate requests of the shipped trace.
std::vector<Published> EngineBatches(size_t requests) {
  auto trace = ReadMooncakeTrace(kShippedTrace, {});
  EXPECT_TRUE(trace.ok()) << trace.status();
  std::vector<Published> out;
  if (!trace.ok()) return out;
  std::vector<PrefixCacheEngine> engines;
  for (int i = 0; i < 2; ++i) engines.emplace_back(PrefixCacheEngineOptions{200, 512});
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> tiers;
  const EngineMapping mapping{.block_size = 512, .cost = &DefaultCost()};
  for (size_t i = 0; i < std::min(requests, trace->requests.size()); ++i) {
    const TraceRequest& r = trace->requests[i];
    const std::string node = kEngines[i % 2];
    EngineEventBatch batch =
        engines[i % 2].Serve(trace->BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
    std::vector<v1::Event> events;
    ToKvlearnEvents(node, batch, mapping, tiers[node], events);
    if (events.empty()) continue;
    Published& p = out.emplace_back();
    p.node = node;
    for (v1::Event& e : events) *p.batch.add_events() = std::move(e);
  }
  return out;
}

// A reference sidecar fed `batches` over gRPC ReportEvents.
std::unique_ptr<SidecarServer> Reference(const std::string& dir,
                                         const std::vector<Published>& batches) {
  auto server = StartServer(RestartTestOptions(dir, "lru"));
  if (server == nullptr) return nullptr;
  auto stub = Connect(server->port());
  std::vector<v1::EventBatch> all;
  for (const Published& p : batches) all.push_back(p.batch);
  v1::ReportSummary summary;
  const grpc::Status s = Report(*stub, all, &summary);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.rejected(), 0u);
  return server;
}

// The block ids a RankEviction of everything on `node`'s HBM pool (where
// engine events put blocks) names, in eviction order.
std::string Drain(v1::Retention::Stub& stub, const std::string& node) {
  grpc::ClientContext ctx;
  v1::RankRequest r;
  r.set_node_id(node);
  r.set_tier(v1::TIER_HBM);
  r.set_bytes_to_free(int64_t{1} << 60);
  v1::RankResponse out;
  const grpc::Status s = stub.RankEviction(&ctx, r, &out);
  if (!s.ok()) return "error " + s.error_message();
  std::string ids;
  for (const auto& v : out.victims()) ids += std::to_string(v.block_id()) + " ";
  return ids;
}

// Asks both the same questions: every pool's status (with the log's next
// sequence: as many events logged), then per engine a drain that reveals
// the whole eviction order.
void ExpectSamePools(v1::Retention::Stub& reference, v1::Retention::Stub& nats) {
  const std::string pools = PoolsOf(reference);
  EXPECT_EQ(PoolsOf(nats), pools);
  EXPECT_NE(pools.find("resident_blocks"), std::string::npos) << "nothing resident: a weak test";
  for (const char* node : kEngines) {
    const std::string drain = Drain(reference, node);
    EXPECT_FALSE(drain.empty()) << node;
    EXPECT_EQ(Drain(nats, node), drain) << node;
  }
}

// Publishes batches [from, to), each with a message id so a retried publish
// is stored once; returns the last stream sequence.
uint64_t PublishRange(JetStreamConnection& c, const std::vector<Published>& batches, size_t from,
                      size_t to) {
  uint64_t last = 0;
  for (size_t i = from; i < to; ++i) {
    auto sequence = c.Publish(std::string(kPrefix) + "." + batches[i].node,
                              batches[i].batch.SerializeAsString(), "batch-" + std::to_string(i));
    EXPECT_TRUE(sequence.ok()) << sequence.status();
    if (sequence.ok()) last = *sequence;
  }
  return last;
}

SidecarOptions NatsOptions(const std::string& dir, const NatsServerProcess& nats) {
  SidecarOptions o = RestartTestOptions(dir, "lru");
  o.nats_url = nats.url();
  return o;
}

// Makes the sidecar's durable consumer ahead of it, as AckAll from the
// stream's first message; `ack_wait_ns` 0 keeps JetStream's default.
void MakeConsumer(jsCtx* js, int64_t ack_wait_ns) {
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = "kvlearn-serve";
  cc.AckPolicy = js_AckAll;
  cc.AckWait = ack_wait_ns;
  cc.FilterSubject = "kvlearn.events.>";
  jsConsumerInfo* ci = nullptr;
  ASSERT_EQ(js_AddConsumer(&ci, js, "KVLEARN_EVENTS", &cc, nullptr, nullptr), NATS_OK);
  jsConsumerInfo_Destroy(ci);
}

class NatsIngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nats_ = std::make_unique<NatsServerProcess>(store_.path());
    if (!nats_->Found()) GTEST_SKIP() << NatsServerProcess::kSkipMessage;
    ASSERT_TRUE(nats_->Start());
    batches_ = EngineBatches(600);
    ASSERT_GT(batches_.size(), 200u);
  }
  TempDir store_, reference_dir_, dir_;
  // A sidecar on `dir` that consumes the stream up to `last`, then stops.
  void ConsumeAll(const std::string& dir, uint64_t last) {
    auto first = StartServer(NatsOptions(dir, *nats_));
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(WaitUntil([&] { return first->nats_ingest()->logged_sequence() >= last; }));
  }
  std::unique_ptr<NatsServerProcess> nats_;
  std::vector<Published> batches_;
};

TEST_F(NatsIngestTest, StreamEventsReachThePoolsReportEventsWould) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  // Published before the sidecar starts and while it runs, with two
  // messages it must refuse (counted, not fatal) among them.
  PublishRange(*publisher, batches_, 0, batches_.size() / 2);
  auto server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  ASSERT_NE(server->nats_ingest(), nullptr);
  ASSERT_TRUE(publisher->Publish(std::string(kPrefix) + ".engine-a", "not a batch").ok());
  v1::EventBatch other = batches_[1].batch;  // engine-b's events
  ASSERT_TRUE(
      publisher->Publish(std::string(kPrefix) + ".engine-a", other.SerializeAsString()).ok());
  const uint64_t last = PublishRange(*publisher, batches_, batches_.size() / 2, batches_.size());
  const NatsIngest& ingest = *server->nats_ingest();
  ASSERT_TRUE(WaitUntil([&] { return ingest.logged_sequence() >= last; }))
      << ingest.logged_sequence() << " of " << last;
  EXPECT_EQ(ingest.messages_consumed(), batches_.size() + 2);
  EXPECT_EQ(ingest.messages_refused(), 2u) << ingest.last_refusal();
  EXPECT_NE(ingest.last_refusal().find("is not the subject's node"), std::string::npos)
      << ingest.last_refusal();
  EXPECT_EQ(ingest.messages_missing(), 0u);
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  ExpectSamePools(*ref_stub, *nats_stub);

  // A restart over the same directory: the log rebuilds the pools and the
  // stream is not applied again (its consumer is past it; a message
  // delivered again would be acknowledged, not applied).
  server.reset();
  server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  nats_stub = Connect(server->port());
  EXPECT_EQ(server->nats_ingest()->logged_sequence(), last);
  ExpectSamePools(*ref_stub, *nats_stub);
}

// Messages delivered but never acknowledged nor processed (lost in flight,
// as on a reconnect) leave a gap before the next delivery: the sidecar reads
// them straight from the stream, in order, instead of waiting for their
// redelivery, and the pools come out the same.
TEST_F(NatsIngestTest, AGapInTheDeliveryIsReadStraightFromTheStream) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  const uint64_t last = PublishRange(*publisher, batches_, 0, batches_.size());
  // The sidecar's durable consumer, made here, with 10 messages taken by
  // someone who vanished: pending, redelivered only after the ack wait.
  MakeConsumer(publisher->js(), int64_t{600} * 1'000'000'000);  // beyond the test
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = "KVLEARN_EVENTS";
  so.Consumer = "kvlearn-serve";
  natsSubscription* sub = nullptr;
  ASSERT_EQ(js_PullSubscribe(&sub, publisher->js(), "kvlearn.events.>", "kvlearn-serve", nullptr,
                             &so, nullptr),
            NATS_OK);
  natsMsgList taken{};
  ASSERT_EQ(natsSubscription_Fetch(&taken, sub, 10, 5000, nullptr), NATS_OK);
  EXPECT_EQ(taken.Count, 10);
  natsMsgList_Destroy(&taken);
  natsSubscription_Destroy(sub);

  auto server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  const NatsIngest& ingest = *server->nats_ingest();
  ASSERT_TRUE(WaitUntil([&] { return ingest.logged_sequence() >= last; }));
  EXPECT_EQ(ingest.messages_fetched_directly(), 10u);
  EXPECT_EQ(ingest.messages_consumed(), batches_.size());
  EXPECT_EQ(ingest.messages_missing(), 0u);
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  ExpectSamePools(*ref_stub, *nats_stub);
}

// Every message delivered again after it was logged (here: the consumer
// replaced by one that starts from the stream's first message, as a lost
// acknowledgement or a crash between the log write and the ack would
// redeliver) is acknowledged without being applied: the pools and the log
// stay as they were.
TEST_F(NatsIngestTest, MessagesDeliveredAgainAreNotAppliedTwice) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  const uint64_t last = PublishRange(*publisher, batches_, 0, batches_.size());
  ConsumeAll(dir_.path(), last);
  ASSERT_EQ(js_DeleteConsumer(publisher->js(), "KVLEARN_EVENTS", "kvlearn-serve", nullptr, nullptr),
            NATS_OK);
  MakeConsumer(publisher->js(), 0);
  auto server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  const NatsIngest& ingest = *server->nats_ingest();
  ASSERT_TRUE(WaitUntil([&] { return ingest.messages_redelivered() >= batches_.size(); }));
  EXPECT_EQ(ingest.messages_redelivered(), batches_.size());
  EXPECT_EQ(ingest.messages_consumed(), 0u);
  EXPECT_EQ(ingest.events_applied(), 0u);
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  ExpectSamePools(*ref_stub, *nats_stub);
}

// A new data directory on an old stream: the consumer, acknowledged up to
// the stream's end, is recreated from the start, and the stream rebuilds the
// pools.
TEST_F(NatsIngestTest, AnEmptyDataDirectoryIsRebuiltFromTheStream) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  const uint64_t last = PublishRange(*publisher, batches_, 0, batches_.size());
  ConsumeAll(dir_.path(), last);
  TempDir fresh;
  auto server = StartServer(NatsOptions(fresh.path(), *nats_));
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->startup_notes().find("recreating it"), std::string::npos)
      << server->startup_notes();
  ASSERT_TRUE(WaitUntil([&] { return server->nats_ingest()->logged_sequence() >= last; }));
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  ExpectSamePools(*ref_stub, *nats_stub);
}

// `kvlearn bridge`'s library between a ZMQ engine and the stream, restarted
// while the engine goes on: every engine batch reaches the stream once (the
// second bridge resumes after the last sequence the stream holds, from the
// engine's replay socket), and the sidecar's pools are those of the same
// events over ReportEvents.
TEST_F(NatsIngestTest, BridgedEngineEventsReachThePoolsOnceAcrossABridgeRestart) {
  auto trace = ReadMooncakeTrace(kShippedTrace, {});
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto publisher = EnginePublisher::Start({.replay_endpoint = "tcp://127.0.0.1:*"});
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  PrefixCacheEngine engine({.capacity_blocks = 200, .block_size = 512});
  absl::flat_hash_set<int> tiers;
  std::vector<Published> expected;
  const auto serve = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const TraceRequest& r = trace->requests[i];
      EngineEventBatch batch =
          engine.Serve(trace->BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
      if (batch.events.empty()) continue;
      (*publisher)->Publish(EncodeKvEventBatch(batch, {}));
      std::vector<v1::Event> events;
      ToKvlearnEvents(kEngines[0], batch, {.block_size = 512, .cost = &DefaultCost()}, tiers,
                      events);
      Published& p = expected.emplace_back();
      p.node = kEngines[0];
      for (v1::Event& e : events) *p.batch.add_events() = std::move(e);
    }
    (*publisher)->Flush();
  };
  const auto bridge_options = [&] {
    EngineBridgeOptions o;
    o.connection.url = nats_->url();
    o.mapping = {.block_size = 512, .cost = &DefaultCost()};
    auto endpoints = ParseEngineEndpoints(std::string(kEngines[0]) + "=" + (*publisher)->endpoint(),
                                          (*publisher)->replay_endpoint());
    EXPECT_TRUE(endpoints.ok()) << endpoints.status();
    o.subscriber.endpoints = *endpoints;
    o.subscriber.start_sequence = 0;
    return o;
  };
  {
    auto bridge = EngineBridge::Start(bridge_options());
    ASSERT_TRUE(bridge.ok()) << bridge.status();
    ASSERT_TRUE((*publisher)->WaitForSubscribers(1, std::chrono::seconds(120)));
    serve(0, 300);
    ASSERT_TRUE(WaitUntil([&] { return (*bridge)->messages_published() == expected.size(); }));
  }
  ASSERT_TRUE(WaitUntil([&] { return (*publisher)->stats().subscriptions == 0; }));
  const size_t first_bridge = expected.size();
  serve(300, 400);  // no bridge listens: the engine's replay buffer keeps them
  auto bridge = EngineBridge::Start(bridge_options());
  ASSERT_TRUE(bridge.ok()) << bridge.status();
  ASSERT_TRUE((*publisher)->WaitForSubscribers(1, std::chrono::seconds(120)));
  serve(400, 600);
  ASSERT_TRUE(
      WaitUntil([&] { return (*bridge)->messages_published() >= expected.size() - first_bridge; }));
  EXPECT_EQ((*bridge)->messages_published(), expected.size() - first_bridge);
  EXPECT_EQ((*bridge)->publish_failures(), 0u);

  auto reference = Reference(reference_dir_.path(), expected);
  ASSERT_NE(reference, nullptr);
  auto server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  const NatsIngest& ingest = *server->nats_ingest();
  ASSERT_TRUE(WaitUntil([&] { return ingest.messages_consumed() >= expected.size(); }));
  EXPECT_EQ(ingest.messages_consumed(), expected.size());
  EXPECT_EQ(ingest.messages_refused(), 0u) << ingest.last_refusal();
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  // One engine here: the second's pools are empty on both sides.
  EXPECT_EQ(PoolsOf(*nats_stub), PoolsOf(*ref_stub));
  EXPECT_FALSE(Drain(*ref_stub, kEngines[0]).empty());
  EXPECT_EQ(Drain(*nats_stub, kEngines[0]), Drain(*ref_stub, kEngines[0]));
}

// The log's next sequence as GetStatus tells it; 0 when it does not answer.
uint64_t LogNext(int port) {
  auto stub = Connect(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetStatusResponse st;
  return stub->GetStatus(&ctx, {}, &st).ok() ? st.log_next_sequence() : 0;
}

TEST_F(NatsIngestTest, KillNineMidStreamAppliesEveryPublishedEventOnce) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  const uint64_t total = LogNext(reference->port());
  ASSERT_GT(total, 0u);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  const std::vector<std::string> args = {
      "--nats", nats_->url(), "--policy", "lru", "--snapshot-every-events", "0"};
  std::atomic<size_t> published{0};
  {
    ServeProcess serve(KVLEARN_BINARY, dir_.path(), args);
    ASSERT_GT(serve.port(), 0);
    std::thread feeder([&] {
      for (size_t i = 0; i < batches_.size(); ++i) {
        PublishRange(*publisher, batches_, i, i + 1);
        published.store(i + 1);
      }
    });
    // Killed once it has logged some of the stream, while more comes.
    ASSERT_TRUE(WaitUntil([&] { return LogNext(serve.port()) > total / 3; }));
    serve.Kill(SIGKILL);
    feeder.join();
  }
  ServeProcess again(KVLEARN_BINARY, dir_.path(), args);
  ASSERT_GT(again.port(), 0);
  ASSERT_TRUE(WaitUntil([&] { return LogNext(again.port()) >= total; }))
      << LogNext(again.port()) << " of " << total;
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(again.port());
  ExpectSamePools(*ref_stub, *nats_stub);
}

TEST_F(NatsIngestTest, ANatsRestartMidStreamLosesNothing) {
  auto reference = Reference(reference_dir_.path(), batches_);
  ASSERT_NE(reference, nullptr);
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  auto server = StartServer(NatsOptions(dir_.path(), *nats_));
  ASSERT_NE(server, nullptr);
  const NatsIngest& ingest = *server->nats_ingest();
  const size_t half = batches_.size() / 2;
  const uint64_t first_half = PublishRange(*publisher, batches_, 0, half);
  ASSERT_TRUE(WaitUntil([&] { return ingest.logged_sequence() >= first_half / 2; }));
  nats_->Stop(SIGTERM);
  ASSERT_TRUE(nats_->Start());
  const uint64_t last = PublishRange(*publisher, batches_, half, batches_.size());
  ASSERT_TRUE(WaitUntil([&] { return ingest.logged_sequence() >= last; }))
      << ingest.logged_sequence() << " of " << last;
  EXPECT_EQ(ingest.messages_consumed(), batches_.size());
  EXPECT_EQ(ingest.messages_refused(), 0u) << ingest.last_refusal();
  EXPECT_EQ(ingest.messages_missing(), 0u);
  const std::string metrics = ingest.Render();
  EXPECT_EQ(metrics.find("kvlearn_nats_reconnects_total 0\n"), std::string::npos) << metrics;
  auto ref_stub = Connect(reference->port());
  auto nats_stub = Connect(server->port());
  ExpectSamePools(*ref_stub, *nats_stub);
}

}  // namespace
}  // namespace kvlearn
