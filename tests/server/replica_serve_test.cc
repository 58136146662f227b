// `kvlearn serve --nats --replica-group` against a real nats-server
// (JetStream) started by the test on a free port:
//  - three replicas share 50 nodes: each node is answered by exactly one,
//    the rendezvous owner of the group's view; the other two redirect
//    (FAILED_PRECONDITION, the owner's address in trailing metadata), and
//    the C++ client follows the redirect; Decide routes each decision; when that owner stops, a
//    survivor rebuilds its nodes from the stream and the client finds it;
//  - kill -9 of one real `kvlearn serve` replica mid-round: its nodes move to
//    the others within 10 s (scaled under sanitizers), and for ten rounds
//    every node's RankEviction answer equals that of a lone sidecar fed the
//    same events in the same order over ReportEvents; the replicas publish
//    node snapshots to JetStream, and the survivors start from them.
//
// The events are hand-made per (node, round): a request's chain of four new
// blocks stored, a hit on an older block, and after each round's decision
// the victims' removals, as the node would confirm them. No assertion
// depends on time except the failover bound; waits poll a condition
// (WaitUntil).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "clients/retention_client.h"
#include "server/jetstream_connection.h"
#include "server/nats_ingest.h"
#include "server/replica_group.h"
#include "server/replica_ownership.h"
#include "tests/server/nats_server_process.h"
#include "tests/server/restart_compare.h"
#include "tests/server/serve_process.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/server/stream_publisher.h"
#include "tests/support/sanitizer_slowdown.h"

namespace kvlearn {
namespace {

constexpr char kPrefix[] = "kvlearn.events";
constexpr int64_t kBlockBytes = 1 << 20;

std::string NodeName(int n) { return "node-" + std::to_string(n); }

// Block k (0..3) of the chain `node` stores in `round`.
uint64_t BlockId(int node, int round, int k) {
  return 1'000'000ull * (node + 1) + 100ull * round + k;
}

// What `node` reports in `round`: pool_configured at first, a request's
// chain of four new blocks (arrival, then each stored), and a hit on the
// second block of an earlier round's chain (refused alike everywhere when
// that block is gone).
v1::EventBatch RoundEvents(int node, int round) {
  v1::EventBatch batch;
  const std::string id = NodeName(node);
  int64_t t = 1'000'000ll * (round + 1);
  const auto add = [&] {
    v1::Event* e = batch.add_events();
    e->set_node_id(id);
    e->set_timestamp_us(t++);
    return e;
  };
  if (round == 0) add()->mutable_pool_configured()->set_capacity_bytes(64 * kBlockBytes);
  if (round > 0) add()->mutable_block_hit()->set_block_id(BlockId(node, round / 2, 1));
  v1::Event* arrival = add();
  for (int k = 0; k < 4; ++k)
    arrival->mutable_request_arrival()->add_block_ids(BlockId(node, round, k));
  arrival->mutable_request_arrival()->set_input_length(4 * 512);
  for (int k = 0; k < 4; ++k) {
    auto* stored = add()->mutable_block_stored();
    stored->set_block_id(BlockId(node, round, k));
    if (k > 0) stored->set_parent_id(BlockId(node, round, k - 1));
    stored->set_tokens(512);
    stored->set_bytes(kBlockBytes);
  }
  return batch;
}

// The removals that confirm `victims` on `node`.
v1::EventBatch Removals(int node, int round, const v1::RankResponse& victims) {
  v1::EventBatch batch;
  int64_t t = 1'000'000ll * (round + 1) + 500'000;
  for (const auto& v : victims.victims()) {
    v1::Event* e = batch.add_events();
    e->set_node_id(NodeName(node));
    e->set_timestamp_us(t++);
    e->mutable_block_removed()->set_block_id(v.block_id());
  }
  return batch;
}

void Publish(JetStreamConnection& c, int node, const v1::EventBatch& batch) {
  if (batch.events_size() == 0) return;
  auto sequence = c.Publish(std::string(kPrefix) + "." + NodeName(node), batch.SerializeAsString());
  EXPECT_TRUE(sequence.ok()) << sequence.status();
}

// One RankEviction at `address`; the status, the answer and the owner a
// redirect names.
struct Asked {
  grpc::Status status;
  v1::RankResponse response;
  std::string owner;
};
Asked AskRank(const std::string& address, const std::string& node, int64_t bytes) {
  auto stub =
      v1::Retention::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::RankRequest r;
  r.set_node_id(node);
  r.set_bytes_to_free(bytes);
  Asked a;
  a.status = stub->RankEviction(&ctx, r, &a.response);
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find(ReplicaOwnership::kOwnerMetadataKey); it != trailers.end()) {
    a.owner.assign(it->second.data(), it->second.size());
  }
  return a;
}

std::string Ids(const v1::RankResponse& r) {
  std::string ids;
  for (const auto& v : r.victims()) {
    ids += std::to_string(v.block_id()) + ":" + std::to_string(v.bytes()) + " ";
  }
  return ids;
}

SidecarOptions ReplicaOptions(const std::string& dir, const NatsServerProcess& nats,
                              const std::string& name) {
  SidecarOptions o = RestartTestOptions(dir, "lru");
  o.nats_url = nats.url();
  o.replica_group = "test";
  o.replica_advertise = "127.0.0.1";
  o.replica_name = name;
  o.replica_ttl_seconds = 2;
  o.replica_heartbeat_seconds = 0.5;
  return o;
}

class ReplicaServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nats_ = std::make_unique<NatsServerProcess>(store_.path());
    if (!nats_->Found()) GTEST_SKIP() << NatsServerProcess::kSkipMessage;
    ASSERT_TRUE(nats_->Start());
  }
  TempDir store_, reference_dir_, dirs_[3], logs_;
  std::unique_ptr<NatsServerProcess> nats_;
};

TEST_F(ReplicaServeTest, EveryNodeIsServedByItsOwnerAndRedirectedElsewhere) {
  constexpr int kNodes = 50;
  std::vector<std::unique_ptr<SidecarServer>> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(
        StartServer(ReplicaOptions(dirs_[i].path(), *nats_, "r" + std::to_string(i))));
    ASSERT_NE(replicas.back(), nullptr);
  }
  for (const auto& r : replicas) {
    ASSERT_TRUE(WaitUntil([&] { return r->replica_ownership()->group()->Members().size() == 3; }));
  }
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  // Two rounds: the second's arrival unpins the first's chain.
  for (int round = 0; round < 2; ++round) {
    for (int n = 0; n < kNodes; ++n) Publish(*publisher, n, RoundEvents(n, round));
  }
  for (const auto& r : replicas) {
    ASSERT_TRUE(WaitUntil([&] { return r->nats_ingest()->logged_sequence() >= 2 * kNodes; }));
  }
  const std::vector<ReplicaMember> members = replicas[0]->replica_ownership()->group()->Members();
  std::vector<int> owned(3, 0);
  for (int n = 0; n < kNodes; ++n) {
    const std::string node = NodeName(n);
    const ReplicaMember owner = ReplicaGroup::Owner(members, node);
    int answered = -1;
    for (int i = 0; i < 3; ++i) {
      const std::string address = "127.0.0.1:" + std::to_string(replicas[i]->port());
      Asked a;
      // A node the view just gave this replica may still be rebuilding.
      ASSERT_TRUE(WaitUntil([&] {
        a = AskRank(address, node, kBlockBytes);
        return a.status.error_code() != grpc::StatusCode::UNAVAILABLE;
      }));
      if (a.status.ok()) {
        EXPECT_EQ(answered, -1) << node << " answered by two replicas";
        answered = i;
        EXPECT_EQ(owner.address, address) << node;
        EXPECT_EQ(a.response.victims_size(), 1) << node;
      } else {
        EXPECT_EQ(a.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
            << a.status.error_message();
        EXPECT_EQ(a.owner, owner.address) << node;
      }
    }
    ASSERT_GE(answered, 0) << node << " answered by none";
    ++owned[answered];
  }
  for (int i = 0; i < 3; ++i) EXPECT_GT(owned[i], 0) << "replica r" << i << " owns no node";
  // Decide routes each decision: at r0, one about each node, each answered
  // or refused naming its owner.
  {
    auto stub = Connect(replicas[0]->port());
    v1::DecideRequest request;
    for (int n = 0; n < kNodes; ++n) {
      v1::RankRequest* rank = request.add_decisions()->mutable_rank();
      rank->set_node_id(NodeName(n));
      rank->set_bytes_to_free(kBlockBytes);
    }
    v1::DecideResponse response;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Decide(&ctx, request, &response).ok());
    ASSERT_EQ(response.results_size(), kNodes);
    const std::string r0 = "127.0.0.1:" + std::to_string(replicas[0]->port());
    for (int n = 0; n < kNodes; ++n) {
      const ReplicaMember owner = ReplicaGroup::Owner(members, NodeName(n));
      const v1::DecisionResult& result = response.results(n);
      if (owner.address == r0) {
        EXPECT_EQ(result.code(), 0) << result.message();
      } else {
        EXPECT_EQ(result.code(), grpc::StatusCode::FAILED_PRECONDITION) << NodeName(n);
        EXPECT_NE(result.message().find(owner.address), std::string::npos) << result.message();
      }
    }
  }
  // Each replica applied only what it follows: together every message once
  // (nothing moved, so nothing was replayed).
  uint64_t applied_messages = 0;
  for (const auto& r : replicas) {
    const NatsIngest& ingest = *r->nats_ingest();
    applied_messages += ingest.messages_consumed() - ingest.messages_not_followed();
  }
  EXPECT_EQ(applied_messages, static_cast<uint64_t>(2 * kNodes));

  // The client follows a redirect once and stays with the owner.
  const std::string node = NodeName(7);
  const ReplicaMember owner = ReplicaGroup::Owner(members, node);
  const auto other = std::find_if(replicas.begin(), replicas.end(), [&](const auto& r) {
    return "127.0.0.1:" + std::to_string(r->port()) != owner.address;
  });
  RetentionClientOptions co;
  co.target = "127.0.0.1:" + std::to_string((*other)->port());
  co.node_id = node;
  co.call_deadline = std::chrono::seconds(10);
  RetentionClient client(co);
  const ClientRankResult first = client.RankEviction(kBlockBytes);
  EXPECT_FALSE(first.from_fallback);
  EXPECT_EQ(first.victims.size(), 1u);
  const ClientRankResult second = client.RankEviction(kBlockBytes);
  EXPECT_FALSE(second.from_fallback);
  const RetentionClientStats stats = client.Stats();
  EXPECT_EQ(stats.redirects_total, 1u);
  EXPECT_EQ(stats.target, owner.address);

  // The owner stops (SIGTERM's path: it leaves the group at once). A survivor
  // rebuilds the node from the stream; the client, its call to the gone owner
  // failed, asks its first target again and is sent to the new owner.
  const auto owner_it = std::find_if(replicas.begin(), replicas.end(), [&](const auto& r) {
    return "127.0.0.1:" + std::to_string(r->port()) == owner.address;
  });
  owner_it->reset();
  ASSERT_TRUE(WaitUntil([&] { return !client.RankEviction(kBlockBytes).from_fallback; }));
  const std::string new_owner = client.Stats().target;
  EXPECT_NE(new_owner, owner.address);
  // At least once more: a survivor that had not yet seen the leave may have
  // sent it to the gone owner meanwhile.
  EXPECT_GE(client.Stats().redirects_total, 2u);
  uint64_t rebuilt = 0;
  for (const auto& r : replicas) {
    if (r == nullptr) continue;
    EXPECT_TRUE(WaitUntil([&] { return r->replica_ownership()->group()->Members().size() == 2; }));
    if ("127.0.0.1:" + std::to_string(r->port()) == new_owner) {
      rebuilt = r->nats_ingest()->nodes_rebuilt();
      EXPECT_GT(r->nats_ingest()->messages_replayed(), 0u);
    }
  }
  EXPECT_GT(rebuilt, 0u) << "the new owner of " << node << " rebuilt nothing";
}

// GetStatus's pool of `node` at `address` as text; empty when it does not
// answer (a replica that just died).
std::string PoolText(const std::string& address, const std::string& node) {
  auto stub =
      v1::Retention::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetStatusResponse status;
  if (!stub->GetStatus(&ctx, {}, &status).ok()) return "";
  for (const auto& p : status.pools()) {
    if (p.node_id() == node) return p.DebugString();
  }
  return "no pool";
}

// The address of the live replica answering for `node` (following one
// redirect from `entry`), once it answers; empty if none does in time.
std::string ServingAddress(const std::string& entry, const std::string& node) {
  std::string found;
  WaitUntil([&] {
    Asked a = AskRank(entry, node, 0);
    if (a.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION && !a.owner.empty()) {
      const std::string owner = a.owner;
      a = AskRank(owner, node, 0);
      if (a.status.ok() || a.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        found = owner;
      }
      return !found.empty();
    }
    // bytes_to_free 0 is refused, by the owner only: it got past routing.
    if (a.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) found = entry;
    return !found.empty();
  });
  return found;
}

TEST_F(ReplicaServeTest, KillNineMovesNodesAndDecisionsMatchALoneSidecar) {
  constexpr int kNodes = 12;
  constexpr int kRounds = 10;
  constexpr int kKillRound = 4;
  auto reference = StartServer(RestartTestOptions(reference_dir_.path(), "lru"));
  ASSERT_NE(reference, nullptr);
  auto ref_stub = Connect(reference->port());
  auto publisher = StreamPublisher(*nats_);
  ASSERT_NE(publisher, nullptr);
  std::vector<std::unique_ptr<ServeProcess>> replicas;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(std::make_unique<ServeProcess>(
        KVLEARN_BINARY, dirs_[i].path(),
        std::vector<std::string>{"--nats", nats_->url(), "--replica-group", "test", "--advertise",
                                 "127.0.0.1", "--replica-name", "r" + std::to_string(i),
                                 "--replica-ttl", "2", "--replica-heartbeat", "0.5", "--policy",
                                 "lru", "--snapshot-every-events", "0",
                                 // Snapshots in JetStream every few rounds of a node, so
                                 // the takeover starts from one (replica_snapshot_test.cc
                                 // checks that in detail).
                                 "--replica-snapshot-events", "20"},
        logs_.File("r" + std::to_string(i) + ".err")));
    ASSERT_GT(replicas.back()->port(), 0);
    addresses.push_back("127.0.0.1:" + std::to_string(replicas.back()->port()));
  }
  int killed = -1;
  for (int round = 0; round < kRounds; ++round) {
    for (int n = 0; n < kNodes; ++n) {
      const v1::EventBatch batch = RoundEvents(n, round);
      v1::ReportSummary summary;
      ASSERT_TRUE(Report(*ref_stub, {batch}, &summary).ok());
      Publish(*publisher, n, batch);
      if (round == kKillRound && n == kNodes / 2) {
        // Killed mid-round, while the stream carries the round's events.
        const std::string owner0 = ServingAddress(addresses[0], NodeName(0));
        killed = static_cast<int>(std::find(addresses.begin(), addresses.end(), owner0) -
                                  addresses.begin());
        ASSERT_LT(killed, 3);
        const auto kill_time = std::chrono::steady_clock::now();
        replicas[killed]->Kill(SIGKILL);
        const std::string entry = addresses[(killed + 1) % 3];
        // Its nodes move: node 0 is answered by a live replica.
        const std::string now_serving = ServingAddress(entry, NodeName(0));
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - kill_time).count();
        ASSERT_FALSE(now_serving.empty());
        EXPECT_NE(now_serving, owner0);
        RecordProperty("failover_seconds", std::to_string(seconds));
        EXPECT_LT(seconds, 10.0 * kSanitizerSlowdown) << "node 0 moved after " << seconds << " s";
      }
    }
    const std::string entry = addresses[killed >= 0 ? (killed + 1) % 3 : 0];
    for (int n = 0; n < kNodes; ++n) {
      const std::string node = NodeName(n);
      // Asked at the replica that serves it once that replica's pool reads as
      // the lone sidecar's (it has applied this round). Asked again if the
      // node moved meanwhile (the views settle at start and after the kill).
      const std::string expected = PoolOf(*ref_stub, node).DebugString();
      Asked got;
      ASSERT_TRUE(WaitUntil([&] {
        const std::string owner = ServingAddress(entry, node);
        if (owner.empty()) return false;
        if (PoolText(owner, node) != expected) return false;
        got = AskRank(owner, node, 3 * kBlockBytes);
        return got.status.ok();
      })) << node
          << " round " << round << ": " << got.status.error_message();
      const v1::RankResponse want = RankOn(*ref_stub, node, 3 * kBlockBytes);
      EXPECT_EQ(Ids(got.response), Ids(want)) << node << " round " << round;
      // Round 0's chain is still pinned (held until the next arrival).
      if (round > 0) EXPECT_EQ(want.victims_size(), 3) << node << " round " << round;
      const v1::EventBatch removals = Removals(n, round, want);
      v1::ReportSummary summary;
      ASSERT_TRUE(Report(*ref_stub, {removals}, &summary).ok());
      Publish(*publisher, n, removals);
    }
  }
  EXPECT_GE(killed, 0);
  // The survivors took the killed replica's nodes over from their snapshots
  // (a line on stderr per node restored).
  int restored = 0;
  for (int i = 0; i < 3; ++i) {
    if (i == killed) continue;
    std::ifstream err(logs_.File("r" + std::to_string(i) + ".err"));
    for (std::string line; std::getline(err, line);) {
      restored += line.find("restored from snapshot") != std::string::npos;
    }
  }
  EXPECT_GT(restored, 0);
}

}  // namespace
}  // namespace kvlearn
