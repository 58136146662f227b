// Periodic snapshots (issue 13, "restart resumes with bounded recovery"): a
// restart loads the latest snapshot of the pools from the log and replays
// only what follows it. For lru the result equals a server that never
// stopped (resident set, counters, eviction order); for the other policies
// the snapshot restores the remembered blocks, resident set, pins and
// counters exactly but rebuilds what the policy counted, so the test checks
// them on a restart right after a snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/event_log.h"
#include "server/pools_snapshot.h"
#include "tests/server/restart_compare.h"

namespace kvlearn {
namespace {

SidecarOptions Options(const std::string& dir, const std::string& policy) {
  SidecarOptions o = RestartTestOptions(dir, policy);
  o.snapshot_every_events = 0;  // the tests call SnapshotNow
  return o;
}

// GetStatus without the fields a restart from a snapshot may change.
std::string Pools(v1::Retention::Stub& stub) {
  grpc::ClientContext ctx;
  v1::GetStatusResponse st;
  EXPECT_TRUE(stub.GetStatus(&ctx, {}, &st).ok());
  std::string out = "log_next_sequence " + std::to_string(st.log_next_sequence()) + "\n";
  for (const auto& p : st.pools()) out += p.DebugString();
  return out;
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

TEST(SnapshotRecoveryTest, LruFromASnapshotAndTheLogAfterItEqualsNeverStopping) {
  const Fed fed(SmallChatTrace(150));
  ASSERT_TRUE(fed.replay.ok());
  TempDir never_dir, restarted_dir;
  auto never = StartServer(Options(never_dir.path(), "lru"));
  auto restarted = StartServer(Options(restarted_dir.path(), "lru"));
  ASSERT_NE(never, nullptr);
  ASSERT_NE(restarted, nullptr);
  // The trace, a snapshot, then events and decisions after it.
  Feed(fed, never->port());
  Feed(fed, restarted->port());
  ASSERT_TRUE(restarted->SnapshotNow().ok());
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(restarted->port());
  for (auto* stub : {never_stub.get(), restarted_stub.get()}) Suffix(*stub, fed.pool_bytes);
  const uint64_t total = EventLog::OpenReadOnly(restarted_dir.path()).value()->next_sequence();

  restarted.reset();
  restarted = StartServer(Options(restarted_dir.path(), "lru"));
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(restarted->replayed_from_snapshot());
  EXPECT_GT(restarted->replay_snapshot_sequence(), 0u);
  EXPECT_EQ(restarted->replayed_events(), total - restarted->replay_snapshot_sequence());
  EXPECT_GT(restarted->replayed_events(), 0u);
  EXPECT_GT(restarted->replayed_decisions(), 0u);
  restarted_stub = Connect(restarted->port());
  const std::string pools = Pools(*never_stub);
  EXPECT_NE(pools.find("resident_blocks"), std::string::npos);
  EXPECT_EQ(Pools(*restarted_stub), pools);
  for (uint32_t n = 0; n < kNodes; ++n) {
    const std::string node = "loadgen-" + std::to_string(n);
    const std::string part = VictimIds(*never_stub, node, static_cast<int64_t>(fed.pool_bytes / 4));
    EXPECT_EQ(VictimIds(*restarted_stub, node, static_cast<int64_t>(fed.pool_bytes / 4)), part);
    EXPECT_EQ(AdmitFresh(*restarted_stub, node, 0xfeedbeefull + n),
              AdmitFresh(*never_stub, node, 0xfeedbeefull + n));
    const std::string drain = VictimIds(*never_stub, node, int64_t{1} << 60);
    EXPECT_FALSE(drain.empty());
    EXPECT_EQ(VictimIds(*restarted_stub, node, int64_t{1} << 60), drain) << node;
  }
  EXPECT_EQ(Pools(*restarted_stub), Pools(*never_stub));
}

class SnapshotPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotPolicyTest, ASnapshotRestoresTheResidentSetAndCounters) {
  const Fed fed(SmallChatTrace(150));
  ASSERT_TRUE(fed.replay.ok());
  TempDir never_dir, restarted_dir;
  auto never = StartServer(Options(never_dir.path(), GetParam()));
  auto restarted = StartServer(Options(restarted_dir.path(), GetParam()));
  ASSERT_NE(never, nullptr);
  ASSERT_NE(restarted, nullptr);
  Feed(fed, never->port());
  Feed(fed, restarted->port());
  ASSERT_TRUE(restarted->SnapshotNow().ok());
  restarted.reset();
  restarted = StartServer(Options(restarted_dir.path(), GetParam()));
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(restarted->replayed_from_snapshot());
  EXPECT_EQ(restarted->replayed_events(), 0u);
  auto never_stub = Connect(never->port());
  auto restarted_stub = Connect(restarted->port());
  const std::string pools = Pools(*never_stub);
  EXPECT_NE(pools.find("resident_blocks"), std::string::npos);
  EXPECT_EQ(Pools(*restarted_stub), pools);
  // A drain evicts every evictable block (all but the current request's
  // pinned chain): the same set on both, in the policy's order or not.
  for (uint32_t n = 0; n < kNodes; ++n) {
    const std::string node = "loadgen-" + std::to_string(n);
    auto sorted = [](std::string ids) {
      std::vector<std::string> parts = absl::StrSplit(ids, ' ', absl::SkipEmpty());
      std::sort(parts.begin(), parts.end());
      return absl::StrJoin(parts, " ");
    };
    const std::string drain = sorted(VictimIds(*never_stub, node, int64_t{1} << 60));
    EXPECT_FALSE(drain.empty());
    EXPECT_EQ(sorted(VictimIds(*restarted_stub, node, int64_t{1} << 60)), drain) << node;
  }
  EXPECT_EQ(Pools(*restarted_stub), Pools(*never_stub));
}

INSTANTIATE_TEST_SUITE_P(Policies, SnapshotPolicyTest,
                         ::testing::Values("lru", "lfu", "fifo", "gdsf", "s3fifo", "sieve", "arc",
                                           "kvlearn-cars"),
                         PolicyTestName);

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

TEST(PoolsSnapshotTest, DecodingRefusesTruncationAndOutOfRangeBlocks) {
  PoolsSnapshot s;
  PoolsSnapshot::Pool pool;
  pool.node = "n";
  pool.image.blocks = {BlockMeta{11, kNoBlock, 0, 512, 1 << 20, 1.5},
                       BlockMeta{12, 0, 1, 512, 1 << 20, 2.5},
                       BlockMeta{13, 1, 2, 512, 1 << 20, 3.5}};
  pool.image.last_seen = {3, 4, 5};
  pool.image.eviction_order = {1, 0};
  pool.image.proposals = {2};  // under resident block 1
  pool.image.proposal_scores = {0.25};
  pool.image.requests_in_flight = {{"r", {0, 1}}};
  s.pools.push_back(pool);
  const std::string bytes = EncodePoolsSnapshot(s);
  auto back = DecodePoolsSnapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->pools.size(), 1u);
  EXPECT_EQ(back->pools[0].image.blocks[1].parent, 0u);
  EXPECT_EQ(back->pools[0].image.blocks[1].recompute_ms, 2.5);
  EXPECT_EQ(back->pools[0].image.eviction_order, (std::vector<BlockIndex>{1, 0}));
  EXPECT_EQ(back->pools[0].image.proposals, (std::vector<BlockIndex>{2}));
  EXPECT_EQ(back->pools[0].image.proposal_scores, (std::vector<double>{0.25}));
  ASSERT_EQ(back->pools[0].image.requests_in_flight.size(), 1u);
  EXPECT_EQ(back->pools[0].image.requests_in_flight[0].first, "r");
  EXPECT_EQ(back->pools[0].image.requests_in_flight[0].second, (std::vector<BlockIndex>{0, 1}));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodePoolsSnapshot(bytes.substr(0, n)).ok()) << n;
  }
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
  s.pools[0].image.eviction_order = {1};
  s.pools[0].image.proposals = {};
  s.pools[0].image.proposal_scores = {};
  s.pools[0].image.requests_in_flight = {};
  EXPECT_EQ(DecodePoolsSnapshot(EncodePoolsSnapshot(s)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvlearn
