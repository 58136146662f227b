// The eviction protocol an engine can live with (issue 14, item 2), checked
// against a real sidecar on loopback:
//  - RankEviction proposes; the view changes on block_removed, so a node that
//    declines a victim and uses it again stays in sync;
//  - blocks of every in-flight request are never proposed, and blocks the
//    engine stored outside any request are proposable at once;
//  - a resent batch is applied and logged once, also across a restart;
//  - victims come in the order of their scores, for every online policy;
//  - Decide answers as the single calls would, and a restart rebuilds it;
//  - a block's size is the one the engine reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "clients/load_generator.h"
#include "datasets/workload_generator.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "sim/pool_simulator.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/default_cost.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr char kNode[] = "engine-0";
constexpr int64_t kBlockBytes = 1000;

v1::Event* Add(v1::EventBatch& batch) {
  v1::Event* e = batch.add_events();
  e->set_node_id(kNode);
  e->set_timestamp_us(1000 * batch.events_size());
  return e;
}

void Arrive(v1::EventBatch& batch, const std::vector<uint64_t>& chain, const std::string& id) {
  auto* a = Add(batch)->mutable_request_arrival();
  for (uint64_t b : chain) {
    a->add_block_ids(b);
    a->add_block_tokens(16);
    a->add_block_bytes(kBlockBytes);
  }
  a->set_request_id(id);
}

void Store(v1::EventBatch& batch, uint64_t id, std::optional<uint64_t> parent,
           int64_t bytes = kBlockBytes) {
  auto* s = Add(batch)->mutable_block_stored();
  s->set_block_id(id);
  if (parent) s->set_parent_id(*parent);
  s->set_tokens(16);
  s->set_bytes(bytes);
}

// A chain stored block by block, root first.
void StoreChain(v1::EventBatch& batch, const std::vector<uint64_t>& chain) {
  for (size_t i = 0; i < chain.size(); ++i) {
    Store(batch, chain[i], i == 0 ? std::nullopt : std::optional<uint64_t>(chain[i - 1]));
  }
}

void Finish(v1::EventBatch& batch, const std::string& id) {
  Add(batch)->mutable_request_finished()->set_request_id(id);
}

class ProtocolTest : public ::testing::Test {
 protected:
  void Start(const std::string& policy = "lru") {
    SidecarOptions o = TestOptions(dir_.path(), policy);
    o.metrics_listen = "";
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }
  void Stop() {
    stub_.reset();
    server_.reset();
  }

  // Sends one batch; every event must be accepted.
  void Send(const v1::EventBatch& batch) {
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*stub_, {batch}, &summary).ok());
    ASSERT_EQ(summary.rejected(), 0u)
        << (summary.rejections_size() ? summary.rejections(0).message() : "");
  }

  v1::RankResponse Rank(int64_t bytes, const std::string& node = kNode) {
    return RankOn(*stub_, node, bytes);
  }

  v1::PoolStatus Pool() { return PoolOf(*stub_, kNode); }

  static std::vector<uint64_t> Ids(const v1::RankResponse& r) {
    std::vector<uint64_t> ids;
    for (const auto& v : r.victims()) ids.push_back(v.block_id());
    return ids;
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

TEST_F(ProtocolTest, DeclinedProposalKeepsSidecarAndEngineInSync) {
  Start();
  // Two one-block prompts, 1 then 2: under LRU, 1 goes first.
  v1::EventBatch b;
  Arrive(b, {1}, "a");
  Store(b, 1, std::nullopt);
  Finish(b, "a");
  Arrive(b, {2}, "b");
  Store(b, 2, std::nullopt);
  Finish(b, "b");
  Send(b);

  const v1::RankResponse first = Rank(1);
  EXPECT_EQ(Ids(first), std::vector<uint64_t>{1});
  // A proposal changes nothing the node holds.
  EXPECT_EQ(Pool().resident_blocks(), 2u);
  EXPECT_EQ(Pool().proposed_blocks(), 1u);
  // Asked again before confirming: the same answer (a lost reply, resent).
  EXPECT_EQ(Ids(Rank(1)), std::vector<uint64_t>{1});
  // Asked for more: the outstanding victim first, then the next one.
  EXPECT_EQ(Ids(Rank(2 * kBlockBytes)), (std::vector<uint64_t>{1, 2}));

  // The engine declines both and serves a request that hits 1: accepted,
  // and 1 is withdrawn (it was just used, so LRU now takes 2 first).
  v1::EventBatch decline;
  Arrive(decline, {1}, "c");
  Add(decline)->mutable_block_hit()->set_block_id(1);
  Finish(decline, "c");
  Send(decline);
  EXPECT_EQ(Pool().resident_blocks(), 2u);
  EXPECT_EQ(Pool().proposed_blocks(), 1u);  // 2 is still proposed
  EXPECT_EQ(Ids(Rank(1)), std::vector<uint64_t>{2});

  // Now it accepts: the removal confirms, and only then does the view change.
  v1::EventBatch accept;
  Add(accept)->mutable_block_removed()->set_block_id(2);
  Send(accept);
  EXPECT_EQ(Pool().resident_blocks(), 1u);
  EXPECT_EQ(Pool().proposed_blocks(), 0u);
  EXPECT_EQ(Pool().evictions(), 1u);
  EXPECT_EQ(Ids(Rank(1)), std::vector<uint64_t>{1});
}

// Proposals are kept by the order they were made in: confirming one in the
// middle leaves the others re-offered first, still in that order.
TEST_F(ProtocolTest, OutstandingVictimsKeepTheirOrderWhenOneInTheMiddleIsConfirmed) {
  Start();
  v1::EventBatch b;
  for (const uint64_t id : {1, 2, 3, 4}) {
    const std::string request = "r" + std::to_string(id);
    Arrive(b, {id}, request);
    Store(b, id, std::nullopt);
    Finish(b, request);
  }
  Send(b);
  EXPECT_EQ(Ids(Rank(3 * kBlockBytes)), (std::vector<uint64_t>{1, 2, 3}));  // LRU order
  v1::EventBatch confirm;
  Add(confirm)->mutable_block_removed()->set_block_id(2);
  Send(confirm);
  EXPECT_EQ(Pool().proposed_blocks(), 2u);
  EXPECT_EQ(Ids(Rank(3 * kBlockBytes)), (std::vector<uint64_t>{1, 3, 4}));
}

TEST_F(ProtocolTest, RemovingAProposedParentTakesItsProposedChildAlong) {
  Start();
  v1::EventBatch b;
  StoreChain(b, {10, 11, 12});  // engine events: no request holds them
  Send(b);
  // Leaf first, then its parent, as the simulator's eviction loop takes them.
  EXPECT_EQ(Ids(Rank(2 * kBlockBytes)), (std::vector<uint64_t>{12, 11}));
  EXPECT_EQ(Pool().proposed_blocks(), 2u);
  // The node removes the parent before the child: the child, without its
  // prefix, is gone too; the root stays.
  v1::EventBatch parent_first;
  Add(parent_first)->mutable_block_removed()->set_block_id(11);
  Send(parent_first);
  EXPECT_EQ(Pool().resident_blocks(), 1u);
  EXPECT_EQ(Pool().proposed_blocks(), 0u);
  // The child's own removal, arriving late, changes nothing.
  v1::EventBatch late;
  Add(late)->mutable_block_removed()->set_block_id(12);
  Send(late);
  EXPECT_EQ(Pool().resident_blocks(), 1u);
  EXPECT_EQ(Ids(Rank(kBlockBytes)), (std::vector<uint64_t>{10}));
}

// Online policies (the server refuses the offline oracles).
std::vector<std::string> OnlinePolicies() {
  std::vector<std::string> names;
  for (std::string_view n : PolicyNames()) {
    if (!IsOfflinePolicy(n)) names.emplace_back(n);
  }
  return names;
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}

class EveryPolicyTest : public ProtocolTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void StartPolicy() {
    SidecarOptions o = TestOptions(dir_.path(), GetParam());
    o.metrics_listen = "";
    o.cost = std::make_shared<CostModel>(DefaultCost());
    if (PolicyUsesModel(GetParam())) {
      o.model_path = dir_.File("model.pt");
      ASSERT_TRUE(CopyTestModel(o.model_path));
    }
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }
};

TEST_P(EveryPolicyTest, BlocksOfEveryInFlightRequestAreNeverProposed) {
  if (IsRecomputeBound(GetParam())) GTEST_SKIP() << "holds nothing, so proposes nothing";
  StartPolicy();
  // Three requests in flight at once (x, y, z), one finished (w), and a
  // chain the engine stored with no request (its events only).
  const std::vector<uint64_t> x = {1, 2, 3}, y = {1, 4}, z = {5, 6}, w = {7, 8, 9}, e = {20, 21};
  v1::EventBatch b;
  for (const auto& [chain, id] :
       std::vector<std::pair<std::vector<uint64_t>, std::string>>{{w, "w"}, {x, "x"}, {y, "y"}}) {
    Arrive(b, chain, id);
  }
  StoreChain(b, w);
  StoreChain(b, x);
  Store(b, 4, 1);
  Finish(b, "w");
  StoreChain(b, e);
  Arrive(b, z, "z");
  StoreChain(b, z);
  Send(b);
  ASSERT_EQ(Pool().requests_in_flight(), 3u);

  // Ask for everything: exactly the blocks no in-flight request needs.
  auto proposed = [&] {
    const v1::RankResponse r = Rank(int64_t{1} << 40);
    const std::vector<uint64_t> ids = Ids(r);
    return std::set<uint64_t>(ids.begin(), ids.end());
  };
  EXPECT_EQ(proposed(), (std::set<uint64_t>{7, 8, 9, 20, 21}));
  // y ends: 4 becomes proposable; 1 is still x's.
  v1::EventBatch end_y;
  Finish(end_y, "y");
  Send(end_y);
  EXPECT_EQ(proposed(), (std::set<uint64_t>{7, 8, 9, 20, 21, 4}));
  v1::EventBatch end_all;
  Finish(end_all, "x");
  Finish(end_all, "z");
  Send(end_all);
  EXPECT_EQ(proposed(), (std::set<uint64_t>{7, 8, 9, 20, 21, 4, 1, 2, 3, 5, 6}));
}

Trace SmallChatTrace() {
  ChatWorkloadOptions o;
  o.seed = 11;
  o.requests = 150;
  o.sessions_per_second = 3;
  o.mean_think_time_s = 5;
  return GenerateChatTrace(o);
}

// The sidecar drains a node's pool in one RankEviction; a simulator-side
// twin of that pool (the same trace through PolicyDriver, which the sidecar
// equals: loadgen_equivalence_test) takes the same victims step by step. At
// every step the victim's score must be the policy's EvictionPriority and no
// lower than that of any leaf it could have evicted instead: the scores give
// the order, under the prefix constraint (a parent only becomes evictable
// once its children are gone, so scores along the list need not be sorted).
TEST_P(EveryPolicyTest, VictimsComeInTheOrderOfTheirScores) {
  if (IsRecomputeBound(GetParam())) GTEST_SKIP() << "holds nothing, so proposes nothing";
  StartPolicy();
  const CostModel cost = DefaultCost();
  const Trace trace = SmallChatTrace();  // the replay points into it
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok()) << replay.status();
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(server_->port());
  lo.pool_bytes = replay->distinct_block_bytes / 10;
  lo.node_prefix = "scored-";
  ASSERT_TRUE(RunLoadgen(*replay, cost, lo).ok());

  PolicyDriver twin(&replay->catalog, lo.pool_bytes);
  std::shared_ptr<const LearnedModel> model;
  if (PolicyUsesModel(GetParam())) {
    auto loaded = LearnedModel::Load(dir_.File("model.pt"));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model = *loaded;
  }
  ASSERT_TRUE(twin.StartPolicy(GetParam(), MakePolicyEnv(cost, model)).ok());
  for (uint32_t ri = 0; ri < trace.requests.size(); ++ri) {
    RequestOutcome outcome;
    ASSERT_TRUE(ServeRequest(*replay, ri, twin, outcome).ok());
  }
  twin.UnpinAll();  // loadgen finished every request

  const v1::RankResponse drained = Rank(int64_t{1} << 50, "scored-0");
  ASSERT_GT(drained.victims_size(), 10);
  for (int i = 0; i < drained.victims_size(); ++i) {
    SCOPED_TRACE(absl::StrCat("victim ", i, " of ", drained.victims_size()));
    const v1::Victim& v = drained.victims(i);
    auto next = twin.NextVictim();
    ASSERT_TRUE(next.ok() && *next != kNoBlock);
    ASSERT_EQ(v.block_id(), replay->catalog[*next].hash_id);
    ASSERT_EQ(v.score(), twin.EvictionPriority(*next));
    for (BlockIndex b = 0; b < replay->catalog.size(); ++b) {
      if (twin.pool().IsEvictable(b)) {
        ASSERT_LE(v.score(), twin.EvictionPriority(b))
            << "leaf " << replay->catalog[b].hash_id << " has a lower score";
      }
    }
    twin.EvictLeaf(*next);
  }
  auto last = twin.NextVictim();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, kNoBlock) << "the sidecar left blocks out";
}

INSTANTIATE_TEST_SUITE_P(Online, EveryPolicyTest, ::testing::ValuesIn(OnlinePolicies()), TestName);

TEST_F(ProtocolTest, RetriedBatchIsAppliedAndLoggedOnceAlsoAfterARestart) {
  Start();
  v1::EventBatch b;
  b.set_batch_id(42);
  Arrive(b, {1, 2}, "");
  StoreChain(b, {1, 2});
  v1::ReportSummary first;
  ASSERT_TRUE(Report(*stub_, {b}, &first).ok());
  EXPECT_EQ(first.accepted(), 3u);
  EXPECT_EQ(first.duplicate_batches(), 0u);
  const v1::PoolStatus before = Pool();

  auto log_size = [&] {
    v1::GetStatusResponse status;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetStatus(&ctx, {}, &status).ok());
    return status.log_next_sequence();
  };
  const uint64_t logged = log_size();
  // The client never saw the answer and sends the batch again.
  v1::ReportSummary again;
  ASSERT_TRUE(Report(*stub_, {b}, &again).ok());
  EXPECT_EQ(again.accepted(), 0u);
  EXPECT_EQ(again.duplicate_batches(), 1u);
  EXPECT_EQ(log_size(), logged);
  EXPECT_EQ(Pool().requests(), before.requests());

  // Another source may use the same number.
  v1::EventBatch other = b;
  other.set_source("another-client");
  other.clear_events();
  Arrive(other, {1}, "");
  v1::ReportSummary from_other;
  ASSERT_TRUE(Report(*stub_, {other}, &from_other).ok());
  EXPECT_EQ(from_other.accepted(), 1u);

  // After a restart the id is still known.
  Stop();
  Start();
  const uint64_t after_restart = log_size();
  ASSERT_EQ(after_restart, logged + 2);  // the other source's arrival and its id
  v1::ReportSummary after;
  ASSERT_TRUE(Report(*stub_, {b}, &after).ok());
  EXPECT_EQ(after.duplicate_batches(), 1u);
  EXPECT_EQ(log_size(), after_restart);
  EXPECT_EQ(Pool().requests(), before.requests() + 1);
}

TEST_F(ProtocolTest, BlockSizesComeFromTheEngine) {
  Start();
  v1::EventBatch b;
  Arrive(b, {1, 2}, "a");           // announced at kBlockBytes each
  Store(b, 1, std::nullopt, 4096);  // the engine holds other sizes
  Store(b, 2, 1, 3000);
  Finish(b, "a");
  Send(b);
  EXPECT_EQ(Pool().resident_bytes(), 4096u + 3000u);
  const v1::RankResponse r = Rank(1);
  ASSERT_EQ(r.victims_size(), 1);
  EXPECT_EQ(r.victims(0).bytes(), 3000);
}

// The same calls, one by one on one server and as one Decide on another.
TEST_F(ProtocolTest, DecideAnswersAsTheSingleCallsAndSurvivesARestart) {
  TempDir other_dir;
  SidecarOptions so = TestOptions(other_dir.path(), "s3fifo");
  so.metrics_listen = "";
  auto single_server = StartServer(so);
  ASSERT_NE(single_server, nullptr);
  auto single = Connect(single_server->port());
  Start("s3fifo");

  v1::EventBatch setup;
  Add(setup)->mutable_pool_configured()->set_capacity_bytes(10 * kBlockBytes);
  for (uint64_t root = 1; root <= 4; ++root) {
    const std::vector<uint64_t> chain = {root, 100 + root, 200 + root};
    const std::string id = absl::StrCat("q", root);
    Arrive(setup, chain, id);
    StoreChain(setup, chain);
    if (root % 2 == 0) Add(setup)->mutable_block_hit()->set_block_id(root);
    Finish(setup, id);
  }
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*single, {setup}, &summary).ok());
  Send(setup);

  std::vector<v1::Decision> decisions;
  for (uint64_t leaf : {301u, 302u}) {
    v1::Decision d;
    auto* a = d.mutable_admit();
    a->set_node_id(kNode);
    auto* c = a->add_candidates();
    c->set_block_id(leaf);
    c->set_parent_id(leaf - 100);
    c->set_tokens(16);
    c->set_bytes(kBlockBytes);
    decisions.push_back(d);
    v1::Decision r;
    r.mutable_rank()->set_node_id(kNode);
    r.mutable_rank()->set_bytes_to_free(2 * kBlockBytes);
    decisions.push_back(r);
  }
  v1::Decision bad;
  bad.mutable_rank()->set_node_id(kNode);  // bytes_to_free 0: refused, the rest goes on
  decisions.insert(decisions.begin() + 1, bad);

  v1::DecideRequest batch;
  for (const auto& d : decisions) *batch.add_decisions() = d;
  v1::DecideResponse batched;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Decide(&ctx, batch, &batched).ok());
  }
  ASSERT_EQ(batched.results_size(), static_cast<int>(decisions.size()));
  for (size_t i = 0; i < decisions.size(); ++i) {
    SCOPED_TRACE(i);
    const v1::DecisionResult& got = batched.results(static_cast<int>(i));
    grpc::ClientContext ctx;
    grpc::Status s;
    std::string want;
    if (decisions[i].has_admit()) {
      v1::AdmitResponse out;
      s = single->Admit(&ctx, decisions[i].admit(), &out);
      EXPECT_EQ(got.admit().SerializeAsString(), out.SerializeAsString());
    } else {
      v1::RankResponse out;
      s = single->RankEviction(&ctx, decisions[i].rank(), &out);
      EXPECT_EQ(got.rank().SerializeAsString(), out.SerializeAsString());
    }
    EXPECT_EQ(got.code(), static_cast<int>(s.error_code()));
  }
  EXPECT_EQ(batched.results(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));

  // A restart redoes the journaled decisions: the whole eviction order is
  // still the single-call server's.
  Stop();
  Start("s3fifo");
  v1::RankRequest drain;
  drain.set_node_id(kNode);
  drain.set_bytes_to_free(int64_t{1} << 40);
  v1::RankResponse expected, got;
  grpc::ClientContext c1, c2;
  ASSERT_TRUE(single->RankEviction(&c1, drain, &expected).ok());
  ASSERT_TRUE(stub_->RankEviction(&c2, drain, &got).ok());
  EXPECT_GT(expected.victims_size(), 4);
  EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());
}

}  // namespace
}  // namespace kvlearn
