// Failover from snapshots kept in JetStream (server/node_snapshot_store.h),
// two in-process replicas of a group on a real nats-server started by the
// test on a free port:
//  - the owner of some nodes publishes their snapshots as events come; it
//    then stops heartbeating (as a killed replica does), the survivor takes
//    its nodes over from their latest snapshot plus the messages after it,
//    and every node's pool and RankEviction answer equal a lone sidecar's fed
//    the same events and calls in the same order, while the survivor read
//    fewer messages than the moved nodes' subjects hold;
//  - the same with a torn snapshot (one chunk of two) and a damaged one (a
//    wrong checksum) published last on a moved node's subject: both skipped;
//  - the same with the events stream purged up to what the snapshots cover:
//    the stream no longer needs the nodes' whole history;
//  - each time, the survivor restarted on its directory (the restored nodes
//    are in its own log) holds the same pools again;
//  - a restore whose tail never reached the local log is completed at the
//    next start, before its node is served.
// The policy is s3fifo, whose queues a decision changes, and the owner
// answers one RankEviction per node before its snapshots, so a restore that
// lost the policy's state or the decisions would answer differently.
#include <gtest/gtest.h>
#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "server/event_log.h"
#include "server/jetstream_connection.h"
#include "server/nats_ingest.h"
#include "server/node_snapshot_store.h"
#include "server/replica_group.h"
#include "server/replica_ownership.h"
#include "tests/server/nats_server_process.h"
#include "tests/server/restart_compare.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/server/stream_publisher.h"

namespace kvlearn {
namespace {

constexpr char kPrefix[] = "kvlearn.events";
constexpr char kPolicy[] = "s3fifo";
constexpr int64_t kBlockBytes = 1 << 20;
constexpr int kNodes = 4;
constexpr int kRoundsBefore = 16;  // before the takeover
constexpr int kRoundsAfter = 4;
constexpr int kDecisionRound = 6;  // the owner answers a RankEviction per node after it

std::string NodeName(int n) { return "node-" + std::to_string(n); }

uint64_t BlockId(int node, int round, int k) {
  return 1'000'000ull * (node + 1) + 100ull * round + k;
}

// `node`'s events of `round`: pool_configured first, then a hit on an
// earlier chain's block (refused alike everywhere when it is gone), a
// request's chain of three new blocks, each stored.
v1::EventBatch RoundEvents(int node, int round) {
  v1::EventBatch batch;
  int64_t t = 1'000'000ll * (round + 1);
  const auto add = [&] {
    v1::Event* e = batch.add_events();
    e->set_node_id(NodeName(node));
    e->set_timestamp_us(t++);
    return e;
  };
  if (round == 0) add()->mutable_pool_configured()->set_capacity_bytes(24 * kBlockBytes);
  if (round > 0) add()->mutable_block_hit()->set_block_id(BlockId(node, round / 3, 0));
  v1::Event* arrival = add();
  for (int k = 0; k < 3; ++k) {
    arrival->mutable_request_arrival()->add_block_ids(BlockId(node, round, k));
  }
  for (int k = 0; k < 3; ++k) {
    auto* stored = add()->mutable_block_stored();
    stored->set_block_id(BlockId(node, round, k));
    if (k > 0) stored->set_parent_id(BlockId(node, round, k - 1));
    stored->set_tokens(512);
    stored->set_bytes(kBlockBytes);
  }
  return batch;
}

v1::EventBatch Removals(int node, const v1::RankResponse& victims) {
  v1::EventBatch batch;
  for (const auto& v : victims.victims()) {
    v1::Event* e = batch.add_events();
    e->set_node_id(NodeName(node));
    e->mutable_block_removed()->set_block_id(v.block_id());
  }
  return batch;
}

std::string Ids(const v1::RankResponse& r) {
  std::string ids;
  for (const auto& v : r.victims()) ids += std::to_string(v.block_id()) + " ";
  return ids;
}

enum class Damage { kNone, kTornAndCorrupt, kEventsPurged };

std::string DamageName(Damage d) {
  switch (d) {
    case Damage::kNone:
      return "Intact";
    case Damage::kTornAndCorrupt:
      return "TornAndCorrupt";
    case Damage::kEventsPurged:
      return "EventsPurged";
  }
  return "";
}
// For gtest's messages.
void PrintTo(Damage d, std::ostream* out) { *out << DamageName(d); }

class ReplicaSnapshotTest : public ::testing::TestWithParam<Damage> {
 protected:
  void SetUp() override {
    nats_ = std::make_unique<NatsServerProcess>(store_.path());
    if (!nats_->Found()) GTEST_SKIP() << NatsServerProcess::kSkipMessage;
    ASSERT_TRUE(nats_->Start());
  }
  SidecarOptions ReplicaOptions(int i) {
    SidecarOptions o = RestartTestOptions(dirs_[i].path(), kPolicy);
    o.nats_url = nats_->url();
    o.replica_group = "test";
    o.replica_advertise = "127.0.0.1";
    o.replica_name = "r" + std::to_string(i);
    o.replica_ttl_seconds = 2;
    o.replica_heartbeat_seconds = 0.5;
    o.snapshot_every_events = 0;
    o.replica_snapshot_events = 30;  // about every fifth round of a node
    o.replica_snapshot_seconds = 0;
    return o;
  }
  // Publishes `batch` of node `n` to the stream and reports it to the
  // reference; returns the stream sequence.
  uint64_t Send(int n, const v1::EventBatch& batch) {
    v1::ReportSummary summary;
    EXPECT_TRUE(Report(*reference_stub_, {batch}, &summary).ok());
    auto sequence =
        publisher_->Publish(std::string(kPrefix) + "." + NodeName(n), batch.SerializeAsString());
    EXPECT_TRUE(sequence.ok()) << sequence.status();
    return sequence.ok() ? *sequence : 0;
  }

  TempDir store_, reference_dir_, dirs_[2];
  std::unique_ptr<NatsServerProcess> nats_;
  std::unique_ptr<JetStreamConnection> publisher_;
  std::unique_ptr<v1::Retention::Stub> reference_stub_;
};

TEST_P(ReplicaSnapshotTest, TakeoverFromTheLatestSnapshotDecidesAsALoneSidecar) {
  auto reference = StartServer(RestartTestOptions(reference_dir_.path(), kPolicy));
  ASSERT_NE(reference, nullptr);
  reference_stub_ = Connect(reference->port());
  publisher_ = StreamPublisher(*nats_);
  ASSERT_NE(publisher_, nullptr);
  std::unique_ptr<SidecarServer> replicas[2];
  for (int i = 0; i < 2; ++i) {
    replicas[i] = StartServer(ReplicaOptions(i));
    ASSERT_NE(replicas[i], nullptr);
  }
  for (const auto& r : replicas) {
    ASSERT_TRUE(WaitUntil([&] { return r->replica_ownership()->group()->Members().size() == 2; }));
  }
  const std::vector<ReplicaMember> members = replicas[0]->replica_ownership()->group()->Members();
  // The owner that stops: r0's, or r1 if rendezvous gave r0 none.
  std::vector<int> owned[2];
  for (int n = 0; n < kNodes; ++n) {
    owned[ReplicaGroup::Owner(members, NodeName(n)).name == "r0" ? 0 : 1].push_back(n);
  }
  const int old = owned[0].empty() ? 1 : 0;
  SidecarServer& owner = *replicas[old];
  SidecarServer& survivor = *replicas[1 - old];  // until its restart below
  auto owner_stub = Connect(owner.port());

  uint64_t last = 0;
  for (int round = 0; round < kRoundsBefore; ++round) {
    for (int n = 0; n < kNodes; ++n) last = Send(n, RoundEvents(n, round));
    if (round != kDecisionRound) continue;
    // One decision per node at its owner, and at the reference; the
    // victims' removals confirm them as the node would.
    for (const auto& r : replicas) {
      ASSERT_TRUE(WaitUntil([&] { return r->nats_ingest()->logged_sequence() >= last; }));
    }
    for (int n = 0; n < kNodes; ++n) {
      auto stub =
          Connect(replicas[ReplicaGroup::Owner(members, NodeName(n)).name == "r0" ? 0 : 1]->port());
      const v1::RankResponse got = RankOn(*stub, NodeName(n), 2 * kBlockBytes);
      const v1::RankResponse want = RankOn(*reference_stub_, NodeName(n), 2 * kBlockBytes);
      ASSERT_EQ(Ids(got), Ids(want)) << NodeName(n);
      last = Send(n, Removals(n, want));
    }
  }
  for (const auto& r : replicas) {
    ASSERT_TRUE(WaitUntil([&] { return r->nats_ingest()->logged_sequence() >= last; }));
  }
  // Every node the owner leaves has a snapshot past the decisions.
  uint64_t covered = UINT64_MAX;
  for (int n : owned[old]) {
    ASSERT_TRUE(WaitUntil([&] {
      return owner.nats_ingest()->snapshot_published_through(NodeName(n)) > 0;
    })) << NodeName(n);
    covered = std::min(covered, owner.nats_ingest()->snapshot_published_through(NodeName(n)));
  }
  const std::string moved = NodeName(owned[old].front());
  if (GetParam() == Damage::kTornAndCorrupt) {
    // Published last, covering the most: a torn one (its second chunk never
    // came) and one whose bytes do not match its checksum.
    const std::string subject = "kvlearn.snapshots.KVLEARN_EVENTS." + moved;
    const auto chunk = [&](const std::string& id, const std::string& i_of_n,
                           const std::string& checksum, const std::string& bytes) {
      auto sequence =
          publisher_->Publish(subject, bytes, id + "/" + i_of_n, 0,
                              {{NodeSnapshotStore::kIdHeader, id},
                               {NodeSnapshotStore::kChunkHeader, i_of_n},
                               {NodeSnapshotStore::kThroughHeader, std::to_string(last)},
                               {NodeSnapshotStore::kChecksumHeader, checksum}});
      ASSERT_TRUE(sequence.ok()) << sequence.status();
    };
    chunk("torn", "1/2", NodeSnapshotStore::Checksum("ab"), "a");
    chunk("corrupt", "1/1", NodeSnapshotStore::Checksum("what was sent"), "what came");
  }
  if (GetParam() == Damage::kEventsPurged) {
    // Everything up to the snapshots goes: a rebuild from the whole subject
    // would now miss the nodes' first events.
    jsOptions o;
    jsOptions_Init(&o);
    o.Stream.Purge.Sequence = covered + 1;
    jsErrCode err = static_cast<jsErrCode>(0);
    ASSERT_EQ(js_PurgeStream(publisher_->js(), "KVLEARN_EVENTS", &o, &err), NATS_OK) << err;
  }

  // The owner stops heartbeating, as a killed one does; the survivor takes
  // its nodes once its key expires.
  const uint64_t replayed_before = survivor.nats_ingest()->messages_replayed();
  owner.replica_ownership()->group()->StopHeartbeats();
  ASSERT_TRUE(WaitUntil([&] {
    const ReplicaOwnership& view = *survivor.replica_ownership();
    return view.group()->Members().size() == 1 &&
           std::all_of(owned[old].begin(), owned[old].end(), [&](int n) {
             return view.RouteOf(NodeName(n)).kind == ReplicaOwnership::Route::kServe;
           });
  }));
  const NatsIngest& ingest = *survivor.nats_ingest();
  EXPECT_EQ(ingest.snapshots_restored(), owned[old].size());
  EXPECT_EQ(ingest.snapshots_skipped(), GetParam() == Damage::kTornAndCorrupt ? 2u : 0u);
  // Each moved node's subject holds kRoundsBefore messages and one removal
  // batch; the survivor read only those after each snapshot.
  const uint64_t whole = owned[old].size() * (kRoundsBefore + 1);
  EXPECT_LT(ingest.messages_replayed() - replayed_before, whole);
  RecordProperty("messages_replayed", std::to_string(ingest.messages_replayed() - replayed_before));

  auto survivor_stub = Connect(survivor.port());
  const auto expect_same = [&](const char* when) {
    for (int n = 0; n < kNodes; ++n) {
      const std::string node = NodeName(n);
      EXPECT_EQ(PoolOf(*survivor_stub, node).DebugString(),
                PoolOf(*reference_stub_, node).DebugString())
          << node << " " << when;
      EXPECT_EQ(Ids(RankOn(*survivor_stub, node, 3 * kBlockBytes)),
                Ids(RankOn(*reference_stub_, node, 3 * kBlockBytes)))
          << node << " " << when;
    }
  };
  expect_same("right after the takeover");
  // And as events go on (the proposals above are withdrawn by nothing: both
  // propose them again first).
  for (int round = kRoundsBefore; round < kRoundsBefore + kRoundsAfter; ++round) {
    for (int n = 0; n < kNodes; ++n) last = Send(n, RoundEvents(n, round));
  }
  ASSERT_TRUE(WaitUntil([&] { return ingest.logged_sequence() >= last; }));
  expect_same("after more events");

  // The restored nodes are in the survivor's own log: restarted on its
  // directory, it holds the same pools.
  replicas[1 - old].reset();
  replicas[1 - old] = StartServer(ReplicaOptions(1 - old));
  ASSERT_NE(replicas[1 - old], nullptr);
  survivor_stub = Connect(replicas[1 - old]->port());
  const ReplicaOwnership& view = *replicas[1 - old]->replica_ownership();
  ASSERT_TRUE(WaitUntil([&] {
    return std::all_of(owned[old].begin(), owned[old].end(), [&](int n) {
      return view.RouteOf(NodeName(n)).kind == ReplicaOwnership::Route::kServe;
    });
  }));
  expect_same("after a restart");
}

// A restore whose tail never reached the local log (a crash between the
// local snapshot and the next write), made by hand: the replica's log holds
// node-0 through `covered`, says the stream is logged further, and carries
// the tail marker. Restarted, the replica applies the tail before serving
// the node, and decides as the lone sidecar fed everything.
class ReplicaTailTest : public ReplicaSnapshotTest {};

TEST_F(ReplicaTailTest, ARestartAppliesTheTailOfARestoreBeforeServingItsNode) {
  auto reference = StartServer(RestartTestOptions(reference_dir_.path(), kPolicy));
  ASSERT_NE(reference, nullptr);
  reference_stub_ = Connect(reference->port());
  publisher_ = StreamPublisher(*nats_);
  ASSERT_NE(publisher_, nullptr);
  const std::string node = NodeName(0);
  uint64_t covered = 0;
  {
    auto replica = StartServer(ReplicaOptions(0));  // a group of one: it owns every node
    ASSERT_NE(replica, nullptr);
    for (int round = 0; round < 8; ++round) covered = Send(0, RoundEvents(0, round));
    ASSERT_TRUE(WaitUntil([&] { return replica->nats_ingest()->logged_sequence() >= covered; }));
  }
  uint64_t last = covered;
  constexpr int kTail = 4;
  for (int round = 8; round < 8 + kTail; ++round) last = Send(0, RoundEvents(0, round));
  {
    auto log = EventLog::Open(dirs_[0].path(), {});
    ASSERT_TRUE(log.ok()) << log.status();
    const std::vector<EventLog::EngineSequence> crash_state = {
        {std::string(NatsIngest::kLogKeyPrefix) + "KVLEARN_EVENTS", last},
        {std::string(NatsIngest::kTailKeyPrefix) + "KVLEARN_EVENTS " + node, covered}};
    ASSERT_TRUE((*log)->RecordEngineSequences(crash_state).ok());
  }
  auto replica = StartServer(ReplicaOptions(0));
  ASSERT_NE(replica, nullptr);
  auto stub = Connect(replica->port());
  v1::RankResponse got;
  // UNAVAILABLE until the tail is applied, then the reference's answer.
  ASSERT_TRUE(WaitUntil([&] {
    v1::RankRequest r;
    r.set_node_id(node);
    r.set_bytes_to_free(3 * kBlockBytes);
    grpc::ClientContext ctx;
    return stub->RankEviction(&ctx, r, &got).ok();
  }));
  EXPECT_EQ(replica->nats_ingest()->messages_replayed(), static_cast<uint64_t>(kTail));
  EXPECT_EQ(Ids(got), Ids(RankOn(*reference_stub_, node, 3 * kBlockBytes)));
  EXPECT_EQ(PoolOf(*stub, node).DebugString(), PoolOf(*reference_stub_, node).DebugString());
}

INSTANTIATE_TEST_SUITE_P(Damages, ReplicaSnapshotTest,
                         ::testing::Values(Damage::kNone, Damage::kTornAndCorrupt,
                                           Damage::kEventsPurged),
                         [](const auto& info) { return DamageName(info.param); });

}  // namespace
}  // namespace kvlearn
