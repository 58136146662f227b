// Engine KV event streams across sidecar restarts, end to end: real
// `kvlearn serve` servers in process over one data directory, real RocksDB,
// an engine replaying the shipped trace through its prefix cache and
// publishing over real ZMQ with a replay buffer that keeps every batch.
//
// A restarted sidecar resumes each engine right after the last batch it
// logged, so the log holds every engine event exactly once; an engine that
// restarted (numbering from 0 again) while the sidecar was down is cleared
// and followed from its new 0, not dropped as duplicates; the log's readers
// (the start-up replay, snapshots, export-log) see only events beside the
// sequence records; a damaged record is a start-up note, not a failure.
//
// No assertion depends on time: waits poll a condition and give up only
// after a generous limit (WaitUntil).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "datasets/mooncake_reader.h"
#include "engine/engine_publisher.h"
#include "engine/kv_event_encoder.h"
#include "engine/prefix_cache_engine.h"
#include "server/engine_ingest.h"
#include "server/event_log.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"

namespace kvlearn {
namespace {

using ::testing::HasSubstr;

constexpr char kShippedTrace[] = KVLEARN_SOURCE_DIR "/datasets/mooncake_conversation_trace.jsonl";
constexpr char kNode[] = "engine-a";

const Trace& ShippedTrace() {
  static const Trace trace = [] {
    auto read = ReadMooncakeTrace(kShippedTrace, {});
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? *std::move(read) : Trace{};
  }();
  return trace;
}

// The last engine sequence the log in `data_dir` holds for kNode; -1 if none.
int64_t LoggedSequence(const std::string& data_dir) {
  auto log = EventLog::OpenReadOnly(data_dir);
  EXPECT_TRUE(log.ok()) << log.status();
  if (!log.ok()) return -1;
  const auto sequence = (*log)->LoggedEngineSequence(kNode);
  return sequence.ok() ? static_cast<int64_t>(*sequence) : -1;
}

// What the sidecar should log for kNode: the kvlearn events of every batch
// the engine published, in order, each once.
struct Expected {
  void Add(EngineEventBatch batch) {
    batch.engine_restarted = std::exchange(restart_next, false);
    ToKvlearnEvents(kNode, batch, {.block_size = 512, .cost = &DefaultCost()}, tiers, events);
  }
  bool restart_next = false;  // the next batch is a restarted engine's first
  absl::flat_hash_set<int> tiers;
  std::vector<v1::Event> events;
};

// One engine process: its prefix cache, and a publisher whose replay buffer
// keeps every batch it numbers (from 0).
class Engine {
 public:
  Engine() : cache_({.capacity_blocks = 200, .block_size = 512}) {
    auto started = EnginePublisher::Start({.replay_endpoint = "tcp://127.0.0.1:*"});
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) publisher_ = *std::move(started);
  }
  bool ok() const { return publisher_ != nullptr; }

  // Serves trace requests [from, to) and publishes their batches (a full hit
  // sends none), adding them to `expected`.
  void Serve(size_t from, size_t to, Expected& expected) {
    const Trace& trace = ShippedTrace();
    for (size_t i = from; i < to; ++i) {
      const TraceRequest& r = trace.requests[i];
      EngineEventBatch batch =
          cache_.Serve(trace.BlocksOf(r), r.input_length, r.timestamp_ms / 1e3);
      if (batch.events.empty()) continue;
      publisher_->Publish(EncodeKvEventBatch(batch, {}));
      expected.Add(std::move(batch));
    }
    publisher_->Flush();
  }

  // Until a subscriber has joined. REQUIRES: none was joined before, or
  // NoSubscriber() returned since.
  bool Subscribed() { return publisher_->WaitForSubscribers(1, std::chrono::seconds(120)); }
  // Until the last subscriber's leaving has reached the publisher.
  bool NoSubscriber() {
    return WaitUntil([this] { return publisher_->stats().subscriptions == 0; });
  }

  uint64_t published() const { return publisher_->stats().published; }
  std::vector<uint64_t> resident() const { return cache_.ResidentBlocks(); }
  void Stop() { publisher_->Stop(); }

  SidecarOptions Options(const std::string& data_dir) const {
    SidecarOptions o = TestOptions(data_dir, "lru");
    o.metrics_listen = "";
    o.engine_events = std::string(kNode) + "=" + publisher_->endpoint();
    o.engine_replay = publisher_->replay_endpoint();
    return o;
  }

 private:
  PrefixCacheEngine cache_;
  std::unique_ptr<EnginePublisher> publisher_;
};

// Until `server` has applied or refused `n` engine events.
bool Applied(const SidecarServer& server, uint64_t n) {
  return WaitUntil(
      [&] { return server.engine_events_applied() + server.engine_events_rejected() >= n; });
}

// The events in the log, as export-log reads them (a read-only open, which
// works while a server has the log open).
std::vector<v1::Event> Logged(const std::string& data_dir) {
  std::vector<v1::Event> out;
  auto log = EventLog::OpenReadOnly(data_dir);
  EXPECT_TRUE(log.ok()) << log.status();
  if (!log.ok()) return out;
  EXPECT_TRUE((*log)
                  ->ForEach([&out](uint64_t seq, std::string_view v) {
                    if (!out.emplace_back().ParseFromArray(v.data(), static_cast<int>(v.size()))) {
                      return absl::DataLossError(absl::StrCat("event ", seq, " does not parse"));
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

// Expects `logged` to be `expected`, event for event.
void ExpectSameEvents(const std::vector<v1::Event>& logged,
                      const std::vector<v1::Event>& expected) {
  EXPECT_EQ(logged.size(), expected.size());
  for (size_t i = 0; i < std::min(logged.size(), expected.size()); ++i) {
    if (logged[i].SerializeAsString() != expected[i].SerializeAsString()) {
      ADD_FAILURE() << "event " << i << " is " << logged[i].ShortDebugString() << ", expected "
                    << expected[i].ShortDebugString();
      return;
    }
  }
}

// Waits until `server` has taken the `n` engine events it should apply
// since it started; expects it to have refused none, and the log in
// `data_dir` to hold `expected`'s events and `engine`'s last sequence.
void ExpectEverythingLogged(const SidecarServer& server, uint64_t n, const std::string& data_dir,
                            const Expected& expected, const Engine& engine) {
  ASSERT_TRUE(Applied(server, n)) << server.engine_events_applied() << " of " << n;
  EXPECT_EQ(server.engine_events_rejected(), 0u);
  EXPECT_EQ(server.engine_events_applied(), n);
  ExpectSameEvents(Logged(data_dir), expected.events);
  EXPECT_EQ(LoggedSequence(data_dir), static_cast<int64_t>(engine.published()) - 1);
}

// (a) Logs part of the engine's stream, stops; the engine goes on (only its
// replay buffer has those batches), the sidecar restarts over the same data
// directory, and more batches come live. The log holds every event once: the
// restarted sidecar asked for what came after the last batch it had logged,
// not for everything from 0, which would have logged the first part twice.
TEST(EngineResumeTest, ARestartedSidecarLogsEveryEngineEventOnce) {
  ASSERT_GT(ShippedTrace().requests.size(), 300u);
  TempDir dir;
  Engine engine;
  ASSERT_TRUE(engine.ok());
  Expected expected;
  uint64_t logged_before = 0;
  {
    auto server = StartServer(engine.Options(dir.path()));
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(engine.Subscribed());
    engine.Serve(0, 100, expected);
    ASSERT_TRUE(Applied(*server, expected.events.size()));
    EXPECT_EQ(server->engine_events_rejected(), 0u);
    logged_before = expected.events.size();
  }
  ASSERT_TRUE(engine.NoSubscriber());
  EXPECT_EQ(LoggedSequence(dir.path()), static_cast<int64_t>(engine.published()) - 1);
  engine.Serve(100, 200, expected);  // nobody listens

  auto server = StartServer(engine.Options(dir.path()));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->replayed_events(), logged_before);
  ASSERT_TRUE(engine.Subscribed());
  engine.Serve(200, 300, expected);
  ExpectEverythingLogged(*server, expected.events.size() - logged_before, dir.path(), expected,
                         engine);
  // The pools the log replay rebuilt, plus what came since, are the engine's.
  ExpectPoolHolds(*Connect(server->port()), kNode, v1::TIER_HBM, engine.resident());
}

// (c) The engine restarts while the sidecar is down: its new process numbers
// from 0, below the sequence the sidecar resumes at. Its first live batch
// shows it, so the sidecar clears the node and follows the new numbering
// from 0 (its first batches from the replay buffer): every new event is
// applied and logged, and the pool holds the new engine's blocks only.
TEST(EngineResumeTest, AnEngineThatRestartedMeanwhileIsClearedAndFollowedFromZero) {
  TempDir dir;
  Expected expected;
  uint64_t first_life_batches = 0;
  {
    Engine first;
    ASSERT_TRUE(first.ok());
    auto server = StartServer(first.Options(dir.path()));
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(first.Subscribed());
    first.Serve(0, 150, expected);
    ASSERT_TRUE(Applied(*server, expected.events.size()));
    first_life_batches = first.published();
  }
  const uint64_t first_life_events = expected.events.size();

  Engine second;
  ASSERT_TRUE(second.ok());
  expected.restart_next = true;
  second.Serve(150, 170, expected);  // nobody listens
  auto server = StartServer(second.Options(dir.path()));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(second.Subscribed());
  second.Serve(170, 200, expected);
  ASSERT_LT(second.published(), first_life_batches);  // every batch below the resume point
  ExpectEverythingLogged(*server, expected.events.size() - first_life_events, dir.path(), expected,
                         second);
  ExpectPoolHolds(*Connect(server->port()), kNode, v1::TIER_HBM, second.resident());
}

// (d) Request arrivals over gRPC, engine batches before and after a
// snapshot: the restart replays the snapshot and the log after it into the
// engine's exact pool, and `kvlearn export-log` (the real binary) writes
// every arrival; neither trips over the sequence records.
TEST(EngineResumeTest, ReplaySnapshotsAndExportLogSeeOnlyTheEvents) {
  const Trace& trace = ShippedTrace();
  TempDir dir;
  Engine engine;
  ASSERT_TRUE(engine.ok());
  Expected expected;
  constexpr int kArrivals = 20;
  {
    auto server = StartServer(engine.Options(dir.path()));
    ASSERT_NE(server, nullptr);
    v1::EventBatch arrivals;
    for (int i = 0; i < kArrivals; ++i) {
      const TraceRequest& r = trace.requests[i];
      v1::Event* e = arrivals.add_events();
      e->set_node_id("router-0");
      e->set_timestamp_us(r.timestamp_ms * 1000);
      for (const uint64_t id : trace.BlocksOf(r)) e->mutable_request_arrival()->add_block_ids(id);
      e->mutable_request_arrival()->set_input_length(r.input_length);
    }
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*Connect(server->port()), {arrivals}, &summary).ok());
    ASSERT_EQ(summary.accepted(), static_cast<uint64_t>(kArrivals));
    ASSERT_TRUE(engine.Subscribed());
    engine.Serve(0, 60, expected);
    ASSERT_TRUE(Applied(*server, expected.events.size()));
    ASSERT_TRUE(server->SnapshotNow().ok());
    const uint64_t before_snapshot = expected.events.size();
    engine.Serve(60, 120, expected);
    ASSERT_TRUE(Applied(*server, expected.events.size()));
    EXPECT_EQ(server->engine_events_rejected(), 0u);
    EXPECT_GT(expected.events.size(), before_snapshot);
  }
  {
    auto server = StartServer(engine.Options(dir.path()));
    ASSERT_NE(server, nullptr);
    EXPECT_TRUE(server->replayed_from_snapshot());
    ExpectPoolHolds(*Connect(server->port()), kNode, v1::TIER_HBM, engine.resident());
  }
  const std::string out = dir.File("exported.jsonl");
  const std::string cmd = std::string(KVLEARN_BINARY) + " export-log --data-dir " + dir.path() +
                          " --out " + out + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto exported = ReadMooncakeTrace(out, {});
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_EQ(exported->requests.size(), static_cast<size_t>(kArrivals));
  for (int i = 0; i < kArrivals; ++i) {
    EXPECT_EQ(exported->requests[i].timestamp_ms, trace.requests[i].timestamp_ms) << i;
  }
}

// A sequence record that is not 8 bytes (written behind EventLog's back) is
// DATA_LOSS to the log; the sidecar starts anyway, says so in its start-up
// notes, and follows that engine from 0 as it would with nothing logged.
TEST(EngineResumeTest, ADamagedSequenceRecordIsNotedAndTheEngineFollowedFromZero) {
  TempDir dir;
  ASSERT_TRUE(EventLog::Open(dir.path(), {}).ok());  // creates the column families
  {
    rocksdb::Options o;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(o, dir.path(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir.path(), families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "engine_sequences") {
        EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), handles[i], kNode, "bad").ok());
      }
    }
    for (rocksdb::ColumnFamilyHandle* h : handles) db->DestroyColumnFamilyHandle(h);
  }
  {
    auto log = EventLog::OpenReadOnly(dir.path());
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ((*log)->LoggedEngineSequence(kNode).status().code(), absl::StatusCode::kDataLoss);
  }

  Engine engine;
  ASSERT_TRUE(engine.ok());
  Expected expected;
  engine.Serve(0, 30, expected);  // before the sidecar: its replay buffer only
  auto server = StartServer(engine.Options(dir.path()));
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->startup_notes(),
              HasSubstr("engine sequence of node 'engine-a' is 3 bytes, not 8; engine engine-a "
                        "is followed from sequence 0"));
  ASSERT_TRUE(engine.Subscribed());
  engine.Serve(30, 60, expected);
  // ... and its first write replaced the damaged record.
  ExpectEverythingLogged(*server, expected.events.size(), dir.path(), expected, engine);
}

}  // namespace
}  // namespace kvlearn
