// Periodic snapshots (issue 13, "restart resumes with bounded recovery"): a
// restart loads the latest snapshot of the pools from the log, each pool's
// policy state included, and replays only what follows it; the result equals
// a server that never stopped, for every online policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "policies/policy_factory.h"
#include "server/event_log.h"
#include "server/pools_snapshot.h"
#include "tests/server/restart_compare.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

SidecarOptions Options(const std::string& dir, const std::string& policy) {
  SidecarOptions o = RestartTestOptions(dir, policy);
  o.snapshot_every_events = 0;  // the tests call SnapshotNow
  if (PolicyUsesModel(policy)) {
    // The same weights in each server's directory.
    o.model_path = dir + "/model.pt";
    EXPECT_TRUE(CopyTestModel(o.model_path));
  }
  return o;
}

// After a snapshot, per node: a partial RankEviction, two new 3-block chains
// stored (one hit again), an Admit of a new block.
void Suffix(v1::Retention::Stub& stub, uint64_t pool_bytes) {
  for (uint32_t n = 0; n < kNodes; ++n) {
    const std::string node = "loadgen-" + std::to_string(n);
    EXPECT_FALSE(VictimIds(stub, node, static_cast<int64_t>(pool_bytes / 8)).empty());
    v1::EventBatch batch;
    for (uint64_t c = 0; c < 2; ++c) {
      const uint64_t base = 0xabc000 + n * 100 + c * 10;
      v1::Event* a = batch.add_events();
      a->set_node_id(node);
      a->set_timestamp_us(int64_t{1} << 40);
      for (uint64_t k = 0; k < 3; ++k) a->mutable_request_arrival()->add_block_ids(base + k);
      for (uint64_t k = 0; k < 3; ++k) {
        v1::Event* e = batch.add_events();
        e->set_node_id(node);
        auto* st = e->mutable_block_stored();
        st->set_block_id(base + k);
        if (k > 0) st->set_parent_id(base + k - 1);
        st->set_tokens(512);
        st->set_bytes(static_cast<int64_t>(DefaultCost().BytesForTokens(512)));
      }
    }
    v1::Event* hit = batch.add_events();
    hit->set_node_id(node);
    hit->mutable_block_hit()->set_block_id(0xabc000 + n * 100);
    v1::ReportSummary summary;
    EXPECT_TRUE(Report(stub, {batch}, &summary).ok());
    EXPECT_EQ(summary.rejected(), 0u) << summary.DebugString();
    AdmitFresh(stub, node, 0xdead00 + n);
  }
}

// Two servers under one policy fed the same trace; the one to restart writes
// a snapshot, both then get the same suffix (events and decisions after it),
// and the one to restart is stopped, its log ready to start from.
// With `periodic`, the one to restart runs the snapshot writer as serve does
// (every `periodic.snapshot_every_events`, its log bounded by
// `periodic.log_max_bytes`) instead of one SnapshotNow after the trace.
struct SnapshottedPair {
  const Fed fed{SmallChatTrace(150)};
  TempDir never_dir, restarted_dir;
  std::unique_ptr<SidecarServer> never;
  std::unique_ptr<v1::Retention::Stub> never_stub;
  std::optional<SidecarOptions> periodic;
};
void FeedSnapshotAndStop(const std::string& policy, SnapshottedPair& p) {
  ASSERT_TRUE(p.fed.replay.ok());
  p.never = StartServer(Options(p.never_dir.path(), policy));
  auto restarted = StartServer(p.periodic ? *p.periodic : Options(p.restarted_dir.path(), policy));
  ASSERT_NE(p.never, nullptr);
  ASSERT_NE(restarted, nullptr);
  Feed(p.fed, p.never->port());
  Feed(p.fed, restarted->port());
  if (p.periodic) {
    // The writer checks every 100 ms; wait (bounded) for its first snapshot.
    for (int i = 0; i < 100 && restarted->snapshots_written() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(restarted->snapshots_written(), 0u);
  } else {
    ASSERT_TRUE(restarted->SnapshotNow().ok());
  }
  p.never_stub = Connect(p.never->port());
  auto restarted_stub = Connect(restarted->port());
  for (auto* stub : {p.never_stub.get(), restarted_stub.get()}) Suffix(*stub, p.fed.pool_bytes);
}

// Rewrites the latest snapshot in the log at `dir` as an older format would
// have stored it: 2 (written before policies saved their state), 3 to 9
// (format 10's bytes, their policy states of older layouts), or 10 (no
// arrival times of in-flight requests).
void RewriteLatestSnapshotAsFormat(const std::string& dir, char format) {
  auto log = EventLog::Open(dir, EventLogOptions{});
  ASSERT_TRUE(log.ok()) << log.status();
  auto latest = (*log)->LatestSnapshot();
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto snapshot = DecodePoolsSnapshot(latest->bytes);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  snapshot->format = format;  // 2: encoded without the policies' state
  std::string bytes = EncodePoolsSnapshot(*snapshot);
  bytes[0] = format;
  ASSERT_TRUE((*log)->WriteSnapshot(latest->sequence, latest->decision, bytes).ok());
  EXPECT_EQ(DecodePoolsSnapshot((*log)->LatestSnapshot()->bytes)->format, format);
}

class SnapshotPolicyTest : public ::testing::TestWithParam<std::string> {};

// Every online policy saves its own state in the snapshot, so a restart from
// it plus the log after it answers as a server that never stopped: the same
// status, victims with the same scores, the same admissions and drain order.
// (Before policies saved their state only lru passed this.)
TEST_P(SnapshotPolicyTest, FromASnapshotAndTheLogAfterItEqualsNeverStopping) {
  SnapshottedPair p;
  ASSERT_NO_FATAL_FAILURE(FeedSnapshotAndStop(GetParam(), p));
  const uint64_t total = EventLog::OpenReadOnly(p.restarted_dir.path()).value()->next_sequence();
  auto restarted = StartServer(Options(p.restarted_dir.path(), GetParam()));
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(restarted->replayed_from_snapshot());
  EXPECT_GT(restarted->replay_snapshot_sequence(), 0u);
  EXPECT_EQ(restarted->replayed_events(), total - restarted->replay_snapshot_sequence());
  EXPECT_GT(restarted->replayed_events(), 0u);
  EXPECT_GT(restarted->replayed_decisions(), 0u);
  ExpectSameAnswers(*p.never_stub, *Connect(restarted->port()), p.fed.pool_bytes);
}

INSTANTIATE_TEST_SUITE_P(Policies, SnapshotPolicyTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc",
                                           "kvlearn-cars", "learned"),
                         PolicyTestName);

// Retention as the defaults set it up: --log-max-bytes holds many
// --snapshot-every-events intervals (serve's --help gives the arithmetic),
// so the latest snapshot lies inside the retained log and trimming loses
// nothing: after the log was trimmed, a restart from the periodic writer's
// latest snapshot answers as a server that never stopped, for a policy
// without state of its own and two with it.
class TrimmedLogSnapshotTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrimmedLogSnapshotTest, ATrimmedLogWithSnapshotsInsideItLosesNothing) {
  SnapshottedPair p;
  SidecarOptions o = Options(p.restarted_dir.path(), GetParam());
  o.snapshot_every_events = 1000;
  o.log_max_bytes = 200'000;  // thousands of events: several intervals
  p.periodic = o;
  ASSERT_NO_FATAL_FAILURE(FeedSnapshotAndStop(GetParam(), p));
  uint64_t first = 0, total = 0;
  {
    auto log = EventLog::OpenReadOnly(p.restarted_dir.path());
    ASSERT_TRUE(log.ok()) << log.status();
    first = (*log)->first_sequence();
    total = (*log)->next_sequence();
  }
  ASSERT_GT(first, 0u) << "nothing trimmed: a weak test";
  auto restarted = StartServer(o);
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(restarted->replayed_from_snapshot()) << restarted->startup_notes();
  EXPECT_GE(restarted->replay_snapshot_sequence(), first);
  EXPECT_EQ(restarted->replayed_events(), total - restarted->replay_snapshot_sequence());
  EXPECT_EQ(restarted->startup_notes().find("trimmed"), std::string::npos)
      << restarted->startup_notes();
  ExpectSameAnswers(*p.never_stub, *Connect(restarted->port()), p.fed.pool_bytes);
}

INSTANTIATE_TEST_SUITE_P(Policies, TrimmedLogSnapshotTest,
                         ::testing::Values("lru", "s3fifo", "learned"), PolicyTestName);

// The periodic writer: with --snapshot-every-events small, snapshots appear
// while a trace is fed, and a restart starts from the latest.
TEST(SnapshotRecoveryTest, SnapshotsAreWrittenEveryNEventsAndUsedAtRestart) {
  const Fed fed(SmallChatTrace(150));
  ASSERT_TRUE(fed.replay.ok());
  TempDir dir;
  SidecarOptions o = Options(dir.path(), "lru");
  o.snapshot_every_events = 2000;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  Feed(fed, server->port());
  // The writer checks every 100 ms; wait (bounded) for it to catch up.
  for (int i = 0; i < 100 && server->snapshots_written() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(server->snapshots_written(), 0u);
  server.reset();
  auto log = EventLog::OpenReadOnly(dir.path());
  ASSERT_TRUE(log.ok()) << log.status();
  auto latest = (*log)->LatestSnapshot();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_TRUE(DecodePoolsSnapshot(latest->bytes).ok());
  log->reset();
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->replayed_from_snapshot());
  EXPECT_EQ(server->replay_snapshot_sequence(), latest->sequence);
}

// A snapshot waits until every event the pools accepted is in the log. Two
// kinds of logged record touch no pool: a batch's batch_received marker and a
// transfer_finished event. Before they were counted as accepted, each left the
// logged count ahead for good, so no snapshot could be taken again after the
// first batch with an id (SnapshotNow: UNAVAILABLE, "events kept arriving").
TEST(SnapshotRecoveryTest, BatchIdsAndTransfersDoNotStopSnapshots) {
  TempDir dir;
  auto server = StartServer(Options(dir.path(), "lru"));
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  std::vector<v1::EventBatch> batches(3);
  for (size_t i = 0; i < batches.size(); ++i) {
    v1::EventBatch& b = batches[i];
    b.set_source("node-a");
    b.set_batch_id(i + 1);
    v1::Event* stored = b.add_events();
    stored->set_node_id("node-a");
    stored->mutable_block_stored()->set_block_id(100 + i);
    stored->mutable_block_stored()->set_tokens(16);
    stored->mutable_block_stored()->set_bytes(1024);
    v1::Event* moved = b.add_events();
    moved->set_node_id("node-a");
    moved->mutable_transfer_finished()->set_src("node-a");
    moved->mutable_transfer_finished()->set_dst("node-b");
    moved->mutable_transfer_finished()->set_bytes(1024);
  }
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, batches, &summary).ok());
  ASSERT_EQ(summary.accepted(), 6u);
  EXPECT_TRUE(server->SnapshotNow().ok());
}

// A snapshot of format 2 (written before policies saved their state), 3 to 9
// (their states of older layouts) would restart them approximately.
class OldSnapshotFormatTest : public ::testing::TestWithParam<char> {
 protected:
  std::string Why() const {
    return absl::StrCat("format ", int{GetParam()}, " (",
                        GetParam() == 2 ? "no policy state" : "policy states of an older layout",
                        ")");
  }
};
INSTANTIATE_TEST_SUITE_P(Formats, OldSnapshotFormatTest,
                         ::testing::Values(char{2}, char{3}, char{4}, char{5}, char{6}, char{7},
                                           char{8}, char{9}),
                         [](const auto& info) { return absl::StrCat("Format", int{info.param}); });

// With the whole log retained it is not used, the start-up notes say so, and
// the full replay equals never stopping.
TEST_P(OldSnapshotFormatTest, IsSkippedAndTheWholeLogReplayed) {
  SnapshottedPair p;
  ASSERT_NO_FATAL_FAILURE(FeedSnapshotAndStop("lfu", p));
  ASSERT_NO_FATAL_FAILURE(RewriteLatestSnapshotAsFormat(p.restarted_dir.path(), GetParam()));
  const uint64_t total = EventLog::OpenReadOnly(p.restarted_dir.path()).value()->next_sequence();
  auto restarted = StartServer(Options(p.restarted_dir.path(), "lfu"));
  ASSERT_NE(restarted, nullptr);
  EXPECT_FALSE(restarted->replayed_from_snapshot());
  EXPECT_EQ(restarted->replayed_events(), total);
  EXPECT_NE(restarted->startup_notes().find(Why() + ": not used"), std::string::npos)
      << restarted->startup_notes();
  ExpectSameAnswers(*p.never_stub, *Connect(restarted->port()), p.fed.pool_bytes);
}

// With the log before it trimmed, the whole log cannot be replayed: the
// snapshot is then loaded the old, approximate way (exact for the resident
// set and counters), and the start-up notes say so.
TEST_P(OldSnapshotFormatTest, OfATrimmedLogIsLoadedApproximately) {
  const Fed fed(SmallChatTrace(150));
  ASSERT_TRUE(fed.replay.ok());
  TempDir dir;
  SidecarOptions o = Options(dir.path(), "lfu");
  o.log_max_bytes = 200'000;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  Feed(fed, server->port());
  ASSERT_TRUE(server->SnapshotNow().ok());
  const std::string pools = PoolsOf(*Connect(server->port()));
  server.reset();
  ASSERT_GT(EventLog::OpenReadOnly(dir.path()).value()->first_sequence(), 0u)
      << "nothing trimmed: a weak test";
  ASSERT_NO_FATAL_FAILURE(RewriteLatestSnapshotAsFormat(dir.path(), GetParam()));
  server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->replayed_from_snapshot());
  EXPECT_NE(server->startup_notes().find(Why() + " and the log before it was trimmed"),
            std::string::npos)
      << server->startup_notes();
  EXPECT_EQ(PoolsOf(*Connect(server->port())), pools);
}

TEST(PoolsSnapshotTest, DecodingRefusesTruncationAndOutOfRangeBlocks) {
  PoolsSnapshot s;
  PoolsSnapshot::Pool pool;
  pool.node = "n";
  const auto block = [](uint64_t id, BlockIndex parent, uint32_t depth, double recompute_gpu_ms) {
    return BlockMeta{.hash_id = id,
                     .parent = parent,
                     .depth = depth,
                     .tokens = 512,
                     .bytes = 1 << 20,
                     .recompute_gpu_ms = recompute_gpu_ms};
  };
  pool.image.blocks = {block(11, kNoBlock, 0, 1.5), block(12, 0, 1, 2.5), block(13, 1, 2, 3.5)};
  // The second block came with a Bailian request: its origin is kept.
  pool.image.blocks[1].origin_type = RequestType::kSearch;
  pool.image.blocks[1].origin_turn = 3;
  pool.image.last_seen = {3, 4, 5};
  pool.image.residents = {1, 0};
  pool.image.proposals = {2};  // under resident block 1
  pool.image.proposal_scores = {0.25};
  pool.image.requests_in_flight = {{"r", {0, 1}}};
  pool.image.request_arrival_us = {7'000'000};
  s.pools.push_back(pool);
  const std::string bytes = EncodePoolsSnapshot(s);
  auto back = DecodePoolsSnapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->pools.size(), 1u);
  EXPECT_EQ(back->pools[0].image.blocks[1].parent, 0u);
  EXPECT_EQ(back->pools[0].image.blocks[1].recompute_gpu_ms, 2.5);
  EXPECT_EQ(back->pools[0].image.blocks[1].origin_type, RequestType::kSearch);
  EXPECT_EQ(back->pools[0].image.blocks[1].origin_turn, 3);
  EXPECT_EQ(back->pools[0].image.blocks[0].origin_type, RequestType::kUnknown);
  EXPECT_EQ(back->pools[0].image.residents, (std::vector<BlockIndex>{1, 0}));
  EXPECT_EQ(back->pools[0].image.proposals, (std::vector<BlockIndex>{2}));
  EXPECT_EQ(back->pools[0].image.proposal_scores, (std::vector<double>{0.25}));
  ASSERT_EQ(back->pools[0].image.requests_in_flight.size(), 1u);
  EXPECT_EQ(back->pools[0].image.requests_in_flight[0].first, "r");
  EXPECT_EQ(back->pools[0].image.requests_in_flight[0].second, (std::vector<BlockIndex>{0, 1}));
  EXPECT_EQ(back->pools[0].image.request_arrival_us, (std::vector<int64_t>{7'000'000}));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodePoolsSnapshot(bytes.substr(0, n)).ok()) << n;
  }
  // With a policy state; as formats 13 and 12 (their states of the layouts
  // before learned's recent-loss rule and fallback: dropped, origins kept),
  // as format 11 (no origins
  // either: they read as not known), as format 10 (no arrival times either),
  // as formats 3 to 9 (format 10's bytes, states of older layouts: dropped);
  // and as format 2 (which leaves the state out).
  PoolsSnapshot with_state = s;
  with_state.pools[0].image.policy_state = std::string("\x01\x02", 2);
  auto state_back = DecodePoolsSnapshot(EncodePoolsSnapshot(with_state));
  ASSERT_TRUE(state_back.ok()) << state_back.status();
  EXPECT_EQ(state_back->format, 14);
  EXPECT_EQ(state_back->pools[0].image.policy_state, std::string("\x01\x02", 2));
  EXPECT_EQ(MissingPolicyStates(*state_back), "");
  for (const char old : {char{13}, char{12}}) {
    with_state.format = old;
    state_back = DecodePoolsSnapshot(EncodePoolsSnapshot(with_state));
    ASSERT_TRUE(state_back.ok()) << state_back.status();
    EXPECT_EQ(state_back->format, old);
    EXPECT_FALSE(state_back->pools[0].image.policy_state.has_value());
    EXPECT_EQ(MissingPolicyStates(*state_back), "policy states of an older layout");
    EXPECT_EQ(state_back->pools[0].image.request_arrival_us, (std::vector<int64_t>{7'000'000}));
    EXPECT_EQ(state_back->pools[0].image.blocks[1].origin_type,
              s.pools[0].image.blocks[1].origin_type);
    EXPECT_EQ(state_back->pools[0].image.blocks[1].origin_turn,
              s.pools[0].image.blocks[1].origin_turn);
  }
  with_state.format = 11;
  state_back = DecodePoolsSnapshot(EncodePoolsSnapshot(with_state));
  ASSERT_TRUE(state_back.ok()) << state_back.status();
  EXPECT_EQ(state_back->format, 11);
  EXPECT_FALSE(state_back->pools[0].image.policy_state.has_value());
  EXPECT_EQ(state_back->pools[0].image.request_arrival_us, (std::vector<int64_t>{7'000'000}));
  EXPECT_EQ(state_back->pools[0].image.blocks[1].origin_type, RequestType::kUnknown);
  EXPECT_EQ(state_back->pools[0].image.blocks[1].origin_turn, 0);
  for (const char old : {char{3}, char{4}, char{5}, char{6}, char{7}, char{8}, char{9}, char{10}}) {
    with_state.format = old;
    state_back = DecodePoolsSnapshot(EncodePoolsSnapshot(with_state));
    ASSERT_TRUE(state_back.ok()) << state_back.status();
    EXPECT_EQ(state_back->format, old);
    EXPECT_FALSE(state_back->pools[0].image.policy_state.has_value());
    EXPECT_EQ(state_back->pools[0].image.residents, (std::vector<BlockIndex>{1, 0}));
    EXPECT_TRUE(state_back->pools[0].image.request_arrival_us.empty());
  }
  with_state.format = 2;
  state_back = DecodePoolsSnapshot(EncodePoolsSnapshot(with_state));
  ASSERT_TRUE(state_back.ok()) << state_back.status();
  EXPECT_EQ(state_back->format, 2);
  EXPECT_FALSE(state_back->pools[0].image.policy_state.has_value());
  EXPECT_EQ(state_back->pools[0].image.residents, (std::vector<BlockIndex>{1, 0}));
  // An arrival time no event could carry (negative as a timestamp).
  PoolsSnapshot late = s;
  late.pools[0].image.request_arrival_us = {-1};
  EXPECT_EQ(DecodePoolsSnapshot(EncodePoolsSnapshot(late)).status().code(),
            absl::StatusCode::kDataLoss);
  // An in-flight request whose blocks are not a chain from a root.
  PoolsSnapshot broken = s;
  broken.pools[0].image.requests_in_flight = {{"r", {1}}};
  EXPECT_EQ(DecodePoolsSnapshot(EncodePoolsSnapshot(broken)).status().code(),
            absl::StatusCode::kDataLoss);
  // A proposal that is also resident.
  broken = s;
  broken.pools[0].image.proposals = {1};
  EXPECT_EQ(DecodePoolsSnapshot(EncodePoolsSnapshot(broken)).status().code(),
            absl::StatusCode::kDataLoss);
  // A resident child without its parent.
  s.pools[0].image.residents = {1};
  s.pools[0].image.proposals = {};
  s.pools[0].image.proposal_scores = {};
  s.pools[0].image.requests_in_flight = {};
  EXPECT_EQ(DecodePoolsSnapshot(EncodePoolsSnapshot(s)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvlearn
