// Every RPC of kvlearn.v1.Retention, the health and reflection services and
// /metrics against a real in-process server on a free loopback port, and each
// kind of bad input with the status code it must get.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

v1::Event Base(const std::string& node, int64_t ts_us = 1000) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(v1::TIER_POOL);
  e.set_timestamp_us(ts_us);
  return e;
}

v1::Event Arrival(const std::string& node, const std::vector<uint64_t>& ids) {
  v1::Event e = Base(node);
  auto* a = e.mutable_request_arrival();
  for (uint64_t id : ids) {
    a->add_block_ids(id);
    a->add_block_tokens(4);
    a->add_block_bytes(100);
  }
  a->set_input_length(4 * static_cast<int64_t>(ids.size()));
  return e;
}

v1::Event Stored(const std::string& node, uint64_t id, std::optional<uint64_t> parent,
                 int64_t tokens = 4, int64_t bytes = 100) {
  v1::Event e = Base(node);
  auto* s = e.mutable_block_stored();
  s->set_block_id(id);
  if (parent) s->set_parent_id(*parent);
  s->set_tokens(tokens);
  s->set_bytes(bytes);
  return e;
}

v1::Event Hit(const std::string& node, uint64_t id) {
  v1::Event e = Base(node);
  e.mutable_block_hit()->set_block_id(id);
  return e;
}

v1::Event Removed(const std::string& node, uint64_t id) {
  v1::Event e = Base(node);
  e.mutable_block_removed()->set_block_id(id);
  return e;
}

v1::EventBatch Batch(std::vector<v1::Event> events) {
  v1::EventBatch b;
  for (auto& e : events) *b.add_events() = std::move(e);
  return b;
}

v1::AdmitRequest AdmitOne(const std::string& node, uint64_t id, std::optional<uint64_t> parent,
                          int64_t bytes = 100) {
  v1::AdmitRequest r;
  r.set_node_id(node);
  r.set_tier(v1::TIER_POOL);
  auto* c = r.add_candidates();
  c->set_block_id(id);
  if (parent) c->set_parent_id(*parent);
  c->set_tokens(4);
  c->set_bytes(bytes);
  return r;
}

class SidecarRpcTest : public ::testing::Test {
 protected:
  void Start(SidecarOptions options) {
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }
  void Start() { Start(TestOptions(dir_.path())); }

  v1::GetStatusResponse Status() {
    grpc::ClientContext ctx;
    v1::GetStatusResponse r;
    EXPECT_TRUE(stub_->GetStatus(&ctx, {}, &r).ok());
    return r;
  }

  // Reports one batch; expects the stream to succeed.
  v1::ReportSummary ReportOk(std::vector<v1::Event> events) {
    v1::ReportSummary summary;
    const grpc::Status s = Report(*stub_, {Batch(std::move(events))}, &summary);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return summary;
  }

  // Reports one event that must be refused with `code`, naming `field`.
  void ExpectRejected(v1::Event e, const std::string& code, const std::string& field) {
    const v1::ReportSummary s = ReportOk({std::move(e)});
    EXPECT_EQ(s.accepted(), 0u);
    ASSERT_EQ(s.rejected(), 1u);
    ASSERT_EQ(s.rejections_size(), 1);
    EXPECT_EQ(s.rejections(0).code(), code) << s.rejections(0).message();
    EXPECT_NE(s.rejections(0).message().find(field), std::string::npos)
        << s.rejections(0).message();
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

TEST_F(SidecarRpcTest, EventsAdmitRankAndStatusFollowTheSimulatorProtocol) {
  Start();
  // Request 1: a cold chain 10 -> 11 -> 12, all admitted and stored.
  v1::ReportSummary s = ReportOk({Arrival("n1", {10, 11, 12}), Stored("n1", 10, std::nullopt),
                                  Stored("n1", 11, 10), Stored("n1", 12, 11)});
  EXPECT_EQ(s.accepted(), 4u);
  EXPECT_EQ(s.rejected(), 0u);
  EXPECT_EQ(s.batches(), 1u);
  EXPECT_EQ(s.first_sequence(), 0u);
  EXPECT_EQ(s.last_sequence(), 3u);

  v1::GetStatusResponse st = Status();
  EXPECT_EQ(st.policy(), "lru");
  EXPECT_EQ(st.log_next_sequence(), 4u);
  ASSERT_EQ(st.pools_size(), 1);
  EXPECT_EQ(st.pools(0).node_id(), "n1");
  EXPECT_EQ(st.pools(0).tier(), v1::TIER_POOL);
  EXPECT_EQ(st.pools(0).resident_blocks(), 3u);
  EXPECT_EQ(st.pools(0).resident_bytes(), 300u);
  EXPECT_EQ(st.pools(0).requests(), 1u);

  // Request 2 shares 10 -> 11 (hits, deepest first) and adds 20.
  s = ReportOk({Arrival("n1", {10, 11, 20}), Hit("n1", 11), Hit("n1", 10)});
  EXPECT_EQ(s.accepted(), 3u);
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse r;
    ASSERT_TRUE(stub_->Admit(&ctx, AdmitOne("n1", 20, 11), &r).ok());
    ASSERT_EQ(r.decisions_size(), 1);
    EXPECT_TRUE(r.decisions(0).keep());
    EXPECT_EQ(r.decisions(0).block_id(), 20u);
    EXPECT_EQ(r.policy(), "lru");
  }
  {
    // Only 12 is evictable: 10 and 11 are pinned by the current request.
    grpc::ClientContext ctx;
    v1::RankRequest req;
    req.set_node_id("n1");
    req.set_tier(v1::TIER_POOL);
    req.set_bytes_to_free(100);
    v1::RankResponse r;
    ASSERT_TRUE(stub_->RankEviction(&ctx, req, &r).ok());
    ASSERT_EQ(r.victims_size(), 1);
    EXPECT_EQ(r.victims(0).block_id(), 12u);
    EXPECT_EQ(r.victims(0).bytes(), 100);
    EXPECT_EQ(r.bytes_freed(), 100);
  }
  // The node follows the advice: its removal of 12 confirms the proposal.
  s = ReportOk({Removed("n1", 12), Stored("n1", 20, 11)});
  EXPECT_EQ(s.accepted(), 2u);
  st = Status();
  EXPECT_EQ(st.pools(0).resident_blocks(), 3u);
  EXPECT_EQ(st.pools(0).evictions(), 1u);

  // A new request unpins everything; rank an explicit candidate list. 20 is
  // the only leaf among them at first, then 11, then 10.
  ReportOk({Arrival("n1", {30})});
  {
    grpc::ClientContext ctx;
    v1::RankRequest req;
    req.set_node_id("n1");
    req.set_bytes_to_free(300);
    for (uint64_t id : {10, 11, 20}) req.add_candidate_ids(id);
    v1::RankResponse r;
    ASSERT_TRUE(stub_->RankEviction(&ctx, req, &r).ok());
    ASSERT_EQ(r.victims_size(), 3);
    EXPECT_EQ(r.victims(0).block_id(), 20u);
    EXPECT_EQ(r.victims(1).block_id(), 11u);
    EXPECT_EQ(r.victims(2).block_id(), 10u);
    EXPECT_EQ(r.bytes_freed(), 300);
  }
  // Proposed, not removed: the node still holds them until it says so.
  EXPECT_EQ(Status().pools(0).resident_blocks(), 3u);
  EXPECT_EQ(Status().pools(0).proposed_blocks(), 3u);
  ReportOk({Removed("n1", 20), Removed("n1", 11), Removed("n1", 10)});
  EXPECT_EQ(Status().pools(0).resident_blocks(), 0u);
}

TEST_F(SidecarRpcTest, AdmitDiscardsEverythingAfterTheFirstRefusal) {
  SidecarOptions o = TestOptions(dir_.path(), "no-cache");
  Start(o);
  ReportOk({Arrival("n1", {1, 2})});
  v1::AdmitRequest r = AdmitOne("n1", 1, std::nullopt);
  auto* c = r.add_candidates();
  c->set_block_id(2);
  c->set_parent_id(1);
  c->set_tokens(4);
  c->set_bytes(100);
  grpc::ClientContext ctx;
  v1::AdmitResponse resp;
  ASSERT_TRUE(stub_->Admit(&ctx, r, &resp).ok());
  ASSERT_EQ(resp.decisions_size(), 2);
  EXPECT_FALSE(resp.decisions(0).keep());
  EXPECT_FALSE(resp.decisions(1).keep());
  EXPECT_EQ(resp.policy(), "no-cache");
}

// Asks the server at `port` to list its services by reflection, called by
// its method path (see the .proto's comment); the call's status and names.
std::pair<grpc::Status, std::vector<std::string>> ListServicesByReflection(int port) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  namespace refl = kvlearn::testing::reflection;
  const grpc::internal::RpcMethod method(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  grpc::ClientContext ctx;
  std::unique_ptr<
      grpc::ClientReaderWriter<refl::ServerReflectionRequest, refl::ServerReflectionResponse>>
      stream(grpc::internal::ClientReaderWriterFactory<
             refl::ServerReflectionRequest, refl::ServerReflectionResponse>::Create(channel.get(),
                                                                                    method, &ctx));
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  stream->Write(req);
  stream->WritesDone();
  refl::ServerReflectionResponse resp;
  std::vector<std::string> names;
  while (stream->Read(&resp)) {
    for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  }
  return {stream->Finish(), names};
}

TEST_F(SidecarRpcTest, HealthAndReflectionServicesAnswer) {
  SidecarOptions o = TestOptions(dir_.path());
  o.reflection = true;
  Start(o);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const std::string service : {"", "kvlearn.v1.Retention"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }

  const auto [status, names] = ListServicesByReflection(server_->port());
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(std::find(names.begin(), names.end(), "kvlearn.v1.Retention"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.health.v1.Health"), names.end());
}

// Reflection hands the API's schema to anyone who reaches the port: a server
// started without `reflection` does not serve it, even in a process where
// another server does (linking gRPC's reflection library registers it for
// every server; the server removes it unless asked).
TEST_F(SidecarRpcTest, ReflectionIsOffByDefault) {
  TempDir other_dir;
  SidecarOptions with = TestOptions(other_dir.path());
  with.reflection = true;
  auto with_reflection = StartServer(with);
  ASSERT_NE(with_reflection, nullptr);
  Start();
  const auto [status, names] = ListServicesByReflection(server_->port());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  EXPECT_TRUE(names.empty());
  EXPECT_TRUE(ListServicesByReflection(with_reflection->port()).first.ok());
  with_reflection->Shutdown();
}

TEST_F(SidecarRpcTest, MetricsEndpointServesPrometheusText) {
  Start();
  ReportOk({Arrival("n1", {1}), Stored("n1", 1, std::nullopt)});
  ExpectRejected(Stored("n1", 2, std::nullopt, 4, 0), "INVALID_ARGUMENT", "bytes");
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse r;
    ASSERT_TRUE(stub_->Admit(&ctx, AdmitOne("n1", 5, 1), &r).ok());
  }
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const std::string& body = res->body;
  for (const char* line : {
           "kvlearn_events_ingested_total{kind=\"request_arrival\"} 1\n",
           "kvlearn_events_ingested_total{kind=\"block_stored\"} 1\n",
           "kvlearn_events_rejected_total{code=\"INVALID_ARGUMENT\"} 1\n",
           "kvlearn_decisions_total{rpc=\"Admit\",decision=\"keep\"} 1\n",
           "kvlearn_decision_latency_seconds_count{rpc=\"Admit\"} 1\n",
           "kvlearn_decision_latency_seconds_bucket{rpc=\"Admit\",le=\"+Inf\"} 1\n",
           "kvlearn_rpcs_total{rpc=\"Admit\",code=\"OK\"} 1\n",
           "kvlearn_blocks_tracked 2\n",  // 1 and the Admit candidate 5
           "kvlearn_blocks_resident 1\n",
           "kvlearn_resident_bytes 100\n",
           "kvlearn_pools 1\n",
           "kvlearn_event_log_next_sequence 2\n",
           // One journaled decision cannot fill one staging file, let alone two.
           "kvlearn_decision_journal_waits_total 0\n",
           "kvlearn_model_info{policy=\"lru\",model_version=\"\"} 1\n",
           "# TYPE kvlearn_decision_latency_seconds histogram\n",
       }) {
    EXPECT_NE(body.find(line), std::string::npos) << line << "\n--- got:\n" << body;
  }
}

// An unfit model (tests/support/test_model.h: trained traffic 2 requests/s,
// 4 blocks per prompt, reuse 0.5, 512-token blocks) is announced at start and
// in /metrics, with the live traffic's ratios to its training traffic.
TEST_F(SidecarRpcTest, MetricsSayTheModelIsUnfitAndHowFarTrafficDrifted) {
  SidecarOptions o = TestOptions(dir_.path(), "learned");
  // tests/support/test_model.h's files (not included: its Eigen does not
  // compile after httplib.h).
  const std::string models = KVLEARN_TEST_MODEL_DIR;
  o.model_path = models + "/test_model_unfit.pt";
  Start(o);
  EXPECT_NE(server_->startup_notes().find("is marked unfit"), std::string::npos)
      << server_->startup_notes();
  EXPECT_EQ(server_->unfit_model_note().find('\n'), std::string::npos);
  // Arrivals at 0, 1, 2, 3 s: 1 request/s; prompts of 1, 2, 3, 2 blocks (2 on
  // average); of 8 block accesses, 1 (2nd), 1, 2 (3rd), 1, 2 (4th) repeat: 5/8.
  std::vector<v1::Event> events;
  const std::vector<std::vector<uint64_t>> prompts = {{1}, {1, 2}, {1, 2, 3}, {1, 2}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::Event e = Arrival("n1", prompts[i]);
    e.set_timestamp_us(static_cast<int64_t>(i) * 1000000);
    events.push_back(std::move(e));
  }
  EXPECT_EQ(ReportOk(std::move(events)).accepted(), 4u);
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  for (const char* line : {
           "kvlearn_model_judged 1\n",
           "kvlearn_model_fit 0\n",
           "kvlearn_live_traffic{quantity=\"requests\"} 4\n",
           "kvlearn_live_traffic{quantity=\"request_rate\"} 1\n",
           "kvlearn_live_traffic{quantity=\"prompt_blocks\"} 2\n",
           "kvlearn_live_traffic{quantity=\"block_reuse\"} 0.625\n",
           "kvlearn_live_traffic{quantity=\"block_size\"} 512\n",
           "kvlearn_traffic_drift_ratio{quantity=\"request_rate\"} 0.5\n",
           "kvlearn_traffic_drift_ratio{quantity=\"prompt_blocks\"} 0.5\n",
           "kvlearn_traffic_drift_ratio{quantity=\"block_reuse\"} 1.25\n",
           "kvlearn_traffic_drift_ratio{quantity=\"block_size\"} 1\n",
       }) {
    EXPECT_NE(res->body.find(line), std::string::npos) << line << "\n--- got:\n" << res->body;
  }
  // A fit or unjudged model in its place: the note goes, the gauge follows.
  ASSERT_TRUE(server_->ReloadModel(models + "/test_model_1.pt").ok());
  EXPECT_EQ(server_->unfit_model_note(), "");
  res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("kvlearn_model_judged 0\n"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("kvlearn_model_fit 0\n"), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find("kvlearn_traffic_drift_ratio"), std::string::npos) << res->body;
}

TEST_F(SidecarRpcTest, StrictNodesRefuseUnknownNodesWithNotFound) {
  SidecarOptions o = TestOptions(dir_.path());
  o.strict_nodes = true;
  o.known_nodes = {"known"};
  Start(o);
  ExpectRejected(Arrival("stranger", {1}), "NOT_FOUND", "node_id");
  grpc::ClientContext ctx;
  v1::AdmitResponse r;
  const grpc::Status s = stub_->Admit(&ctx, AdmitOne("stranger", 1, std::nullopt), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("node_id"), std::string::npos) << s.error_message();
  EXPECT_EQ(ReportOk({Arrival("known", {1})}).accepted(), 1u);
}

TEST_F(SidecarRpcTest, MalformedIdsAreInvalidArgumentNamingTheField) {
  Start();
  ExpectRejected(Arrival("bad node!", {1}), "INVALID_ARGUMENT", "node_id");
  ExpectRejected(Arrival("", {1}), "INVALID_ARGUMENT", "node_id");
  ExpectRejected(Arrival("n1", {1, 2, 1}), "INVALID_ARGUMENT", "block_ids[2]");
  ExpectRejected(Arrival("n1", {}), "INVALID_ARGUMENT", "block_ids");
  ExpectRejected(Stored("n1", 7, 7), "INVALID_ARGUMENT", "parent_id");
  // 2 follows 1 here; a chain putting 2 behind 3 contradicts that.
  ReportOk({Arrival("n1", {1, 2})});
  ExpectRejected(Arrival("n1", {3, 2}), "INVALID_ARGUMENT", "block_ids[1]");
  {
    v1::AdmitRequest r = AdmitOne("n1", 1, std::nullopt);
    auto* c = r.add_candidates();
    c->set_block_id(9);
    c->set_parent_id(5);  // not the previous candidate
    c->set_tokens(4);
    c->set_bytes(100);
    grpc::ClientContext ctx;
    v1::AdmitResponse resp;
    const grpc::Status s = stub_->Admit(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("candidates[1].parent_id"), std::string::npos)
        << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse resp;
    const grpc::Status s = stub_->Admit(&ctx, AdmitOne("n1", 2, 3), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("candidates[0].parent_id"), std::string::npos)
        << s.error_message();
  }
  // Events about blocks the node does not hold.
  ExpectRejected(Hit("n1", 1), "FAILED_PRECONDITION", "block_hit.block_id");
  ExpectRejected(Removed("n1", 99), "NOT_FOUND", "block_removed.block_id");
  ExpectRejected(Stored("n1", 2, 1), "FAILED_PRECONDITION", "block_stored.parent_id");
  ReportOk({Stored("n1", 1, std::nullopt), Stored("n1", 2, 1)});
  ExpectRejected(v1::Event(Base("n1")), "INVALID_ARGUMENT", "kind");
}

TEST_F(SidecarRpcTest, ZeroAndNegativeSizesAreInvalidArgument) {
  Start();
  ExpectRejected(Stored("n1", 1, std::nullopt, 4, 0), "INVALID_ARGUMENT", "block_stored.bytes");
  ExpectRejected(Stored("n1", 1, std::nullopt, -1, 100), "INVALID_ARGUMENT", "block_stored.tokens");
  v1::Event e = Arrival("n1", {1, 2});
  e.mutable_request_arrival()->set_block_bytes(1, -3);
  ExpectRejected(e, "INVALID_ARGUMENT", "request_arrival.block_bytes[1]");
  v1::Event neg = Arrival("n1", {1});
  neg.set_timestamp_us(-1);
  ExpectRejected(neg, "INVALID_ARGUMENT", "timestamp_us");
  v1::Event pc = Base("n1");
  pc.mutable_pool_configured()->set_capacity_bytes(0);
  ExpectRejected(pc, "INVALID_ARGUMENT", "pool_configured.capacity_bytes");
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse r;
    const grpc::Status s = stub_->Admit(&ctx, AdmitOne("n1", 1, std::nullopt, -5), &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("candidates[0].bytes"), std::string::npos);
  }
  for (int64_t bytes : {0, -1}) {
    grpc::ClientContext ctx;
    v1::RankRequest req;
    req.set_node_id("n1");
    req.set_bytes_to_free(bytes);
    v1::RankResponse r;
    const grpc::Status s = stub_->RankEviction(&ctx, req, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("bytes_to_free"), std::string::npos);
  }
}

TEST_F(SidecarRpcTest, BatchOverTheLimitEndsTheStreamWithResourceExhausted) {
  SidecarOptions o = TestOptions(dir_.path());
  o.max_events_per_batch = 4;
  Start(o);
  std::vector<v1::Event> big;
  for (uint64_t i = 0; i < 5; ++i) big.push_back(Arrival("n1", {i}));
  v1::ReportSummary summary;
  const grpc::Status s =
      Report(*stub_, {Batch({Arrival("n1", {100}), Arrival("n1", {101})}), Batch(big)}, &summary);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("events"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-events-per-batch"), std::string::npos);
  // The batch before it was logged.
  EXPECT_EQ(Status().log_next_sequence(), 2u);
}

TEST_F(SidecarRpcTest, MessageOverTheSizeLimitIsResourceExhausted) {
  SidecarOptions o = TestOptions(dir_.path());
  o.max_message_bytes = 4096;
  Start(o);
  std::vector<uint64_t> ids(2000);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i + 1;
  v1::ReportSummary summary;
  const grpc::Status s = Report(*stub_, {Batch({Arrival("n1", ids)})}, &summary);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(Status().log_next_sequence(), 0u);
}

TEST_F(SidecarRpcTest, CandidatesOverTheLimitAreResourceExhausted) {
  SidecarOptions o = TestOptions(dir_.path());
  o.max_candidates = 2;
  Start(o);
  v1::AdmitRequest r;
  r.set_node_id("n1");
  for (uint64_t i = 1; i <= 3; ++i) {
    auto* c = r.add_candidates();
    c->set_block_id(i);
    if (i > 1) c->set_parent_id(i - 1);
    c->set_tokens(4);
    c->set_bytes(100);
  }
  {
    grpc::ClientContext ctx;
    v1::AdmitResponse resp;
    const grpc::Status s = stub_->Admit(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("candidates"), std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    v1::RankRequest req;
    req.set_node_id("n1");
    req.set_bytes_to_free(1);
    for (uint64_t i = 1; i <= 3; ++i) req.add_candidate_ids(i);
    v1::RankResponse resp;
    const grpc::Status s = stub_->RankEviction(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("candidate_ids"), std::string::npos);
  }
}

TEST_F(SidecarRpcTest, StreamCancelledMidBatchKeepsServingAndLosesNothingLogged) {
  Start();
  grpc::ClientContext ctx;
  v1::ReportSummary summary;
  auto writer = stub_->ReportEvents(&ctx, &summary);
  ASSERT_TRUE(writer->Write(Batch({Arrival("n1", {1}), Arrival("n1", {2})})));
  // Wait (bounded) until the server has read and logged the first batch.
  for (int i = 0; i < 500 && Status().log_next_sequence() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(Status().log_next_sequence(), 2u);
  ctx.TryCancel();  // the client goes away before finishing the stream
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  // The server is still up and the logged events are still there.
  v1::GetStatusResponse st = Status();
  EXPECT_EQ(st.log_next_sequence(), 2u);
  EXPECT_EQ(ReportOk({Arrival("n1", {3})}).accepted(), 1u);
  EXPECT_EQ(Status().log_next_sequence(), 3u);
}

TEST_F(SidecarRpcTest, ReloadModelRefusalsKeepTheCurrentPolicy) {
  Start();
  auto reload = [&](const std::string& path) {
    grpc::ClientContext ctx;
    v1::ReloadModelRequest req;
    req.set_path(path);
    v1::ReloadModelResponse resp;
    return stub_->ReloadModel(&ctx, req, &resp);
  };
  const std::string missing = dir_.File("no-such-model.pt");
  grpc::Status s = reload(missing);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find(missing), std::string::npos) << s.error_message();

  s = reload(dir_.path());  // a directory
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find(dir_.path()), std::string::npos) << s.error_message();

  s = reload("");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("path"), std::string::npos);

  const std::string garbage = dir_.File("garbage.pt");
  std::ofstream(garbage) << "not a model";
  s = reload(garbage);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find(garbage), std::string::npos) << s.error_message();

  // Still serving the old policy, and serving at all.
  EXPECT_EQ(Status().policy(), "lru");
  EXPECT_EQ(ReportOk({Arrival("n1", {1})}).accepted(), 1u);
}

TEST_F(SidecarRpcTest, ConcurrentCallsOnOneNodeKeepItsStateConsistent) {
  Start();
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = Connect(server_->port());
      for (int i = 0; i < kRounds; ++i) {
        // One-block chains, so another thread's eviction can never orphan a
        // block this batch stores.
        const uint64_t root = 1'000'000ull * (t + 1) + i;
        v1::ReportSummary summary;
        if (!Report(*stub,
                    {Batch({Arrival("shared", {root}), Stored("shared", root, std::nullopt)})},
                    &summary)
                 .ok() ||
            summary.accepted() != 2) {
          ++failures;
        }
        grpc::ClientContext ctx;
        v1::RankRequest req;
        req.set_node_id("shared");
        req.set_bytes_to_free(150);
        v1::RankResponse resp;
        if (!stub->RankEviction(&ctx, req, &resp).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const v1::GetStatusResponse st = Status();
  ASSERT_EQ(st.pools_size(), 1);
  EXPECT_EQ(st.pools(0).resident_bytes(), 100 * st.pools(0).resident_blocks());
  EXPECT_EQ(st.pools(0).requests(), static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_EQ(st.pools(0).blocks_tracked(), static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_EQ(st.log_next_sequence(), static_cast<uint64_t>(2 * kThreads * kRounds));
}

TEST(SidecarStartTest, PlaintextOnANonLoopbackAddressIsRefused) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.listen = "0.0.0.0:0";
  auto server = SidecarServer::Start(o);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  // Nothing would authenticate callers there (sidecar_auth_test.cc has the rest).
  EXPECT_NE(server.status().message().find("--auth-tokens"), std::string::npos);
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:1"));
}

// A model that cannot be loaded leaves `learned` without one: it serves
// on its lru and gdsf experts, and the notes name the file.
TEST(SidecarStartTest, UnavailableModelLeavesLearnedWithoutOne) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path(), "");
  o.model_path = dir.File("missing.pt");
  auto server = SidecarServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->policy(), "learned");
  EXPECT_NE((*server)->startup_notes().find("missing.pt"), std::string::npos)
      << (*server)->startup_notes();
}

// --policy learned without --model serves learned, with nothing to note;
// learned-model without one is refused, naming the flag.
TEST(SidecarStartTest, LearnedNeedsNoModelAndLearnedModelDoes) {
  TempDir dir;
  auto learned = SidecarServer::Start(TestOptions(dir.File("a"), "learned"));
  ASSERT_TRUE(learned.ok()) << learned.status();
  EXPECT_EQ((*learned)->policy(), "learned");
  EXPECT_EQ((*learned)->startup_notes(), "");
  auto alone = SidecarServer::Start(TestOptions(dir.File("b"), "learned-model"));
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("--model"), std::string::npos) << alone.status();
}

}  // namespace
}  // namespace kvlearn
