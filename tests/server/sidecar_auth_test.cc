// Authentication and roles on a real sidecar over real gRPC on 127.0.0.1:
// calls without a token, a reporter acting for another node or calling an
// operator's method, ReloadModel inside and outside --model-dir, the tokens
// file re-read when it changes, a bad line refusing the start, the loopback
// rule for the listen address and for ReloadModel's caller, the /metrics
// counters, and the clients sending their token.
// Eigen (through test_model.h) before httplib.h, which includes <resolv.h>:
// its _res macro breaks Eigen's headers.
#include "tests/support/test_model.h"
// The rest.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "clients/load_generator.h"
#include "clients/retention_client.h"
#include "datasets/workload_generator.h"
#include "server/access_control.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr char kReporter[] = "reporter-a-token-0001";  // bound to node-a
constexpr char kAnyReporter[] = "reporter-any-token-01";
constexpr char kOperator[] = "operator-token-000001";

std::string TokensText() {
  return absl::StrCat("# test principals\n", kReporter, " reporter node-a\n", kAnyReporter,
                      " reporter *\n", kOperator, " operator\n");
}

// Writes `text` to `path` through a rename, as an editor or a deploy would:
// the watcher sees a new inode even within one mtime tick.
void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);
}

void WithToken(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
}

v1::Event EventFor(const std::string& node, uint64_t block) {
  v1::Event e;
  e.set_node_id(node);
  e.set_timestamp_us(1);
  e.mutable_block_stored()->set_block_id(block);
  e.mutable_block_stored()->set_tokens(16);
  e.mutable_block_stored()->set_bytes(100);
  return e;
}

v1::EventBatch BatchOf(std::initializer_list<v1::Event> events) {
  v1::EventBatch b;
  for (const v1::Event& e : events) *b.add_events() = e;
  return b;
}

// The first IPv4 address of this machine that is not loopback ("" if none).
std::string OwnNonLoopbackAddress() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (const ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a, text, sizeof(text));
    found = text;
  }
  freeifaddrs(all);
  return found;
}

class SidecarAuthTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteFileAtomically(TokensFile(), TokensText()); }

  std::string TokensFile() const { return files_.File("tokens.txt"); }

  SidecarOptions Options(const std::string& policy = "lru") {
    SidecarOptions o = TestOptions(data_.path(), policy);
    o.auth_tokens_file = TokensFile();
    o.auth_reload_check_seconds = 0.05;
    return o;
  }

  void Start(const SidecarOptions& o) {
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  // A RetentionClient for node-a of the started server, without a token.
  RetentionClientOptions NodeAClient() const {
    RetentionClientOptions co;
    co.target = "127.0.0.1:" + std::to_string(server_->port());
    co.node_id = "node-a";
    co.call_deadline = std::chrono::seconds(10);
    co.flush_deadline = std::chrono::seconds(10);
    return co;
  }

  grpc::Status GetStatus(const std::string& token, v1::GetStatusResponse* out) {
    grpc::ClientContext ctx;
    WithToken(ctx, token);
    return stub_->GetStatus(&ctx, {}, out);
  }

  grpc::Status Admit(const std::string& token, const std::string& node) {
    grpc::ClientContext ctx;
    WithToken(ctx, token);
    v1::AdmitRequest r;
    r.set_node_id(node);
    auto* c = r.add_candidates();
    c->set_block_id(7);
    c->set_tokens(16);
    c->set_bytes(100);
    v1::AdmitResponse out;
    return stub_->Admit(&ctx, r, &out);
  }

  grpc::Status Reload(const std::string& token, const std::string& path,
                      v1::ReloadModelResponse* out = nullptr) {
    grpc::ClientContext ctx;
    WithToken(ctx, token);
    v1::ReloadModelRequest r;
    r.set_path(path);
    v1::ReloadModelResponse ignored;
    return stub_->ReloadModel(&ctx, r, out ? out : &ignored);
  }

  grpc::Status ReportAs(const std::string& token, const std::vector<v1::EventBatch>& batches,
                        v1::ReportSummary* summary) {
    grpc::ClientContext ctx;
    WithToken(ctx, token);
    auto writer = stub_->ReportEvents(&ctx, summary);
    for (const auto& b : batches) {
      if (!writer->Write(b)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::string Metrics() {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }

  TempDir data_, files_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

// With authentication a peer is a principal: one reporter holding its
// --max-streams-per-peer streams open is refused one more, naming the flag
// (and not its token), while another principal on the same address still
// reports; a closed stream gives its slot back.
TEST_F(SidecarAuthTest, OpenStreamsArePerPrincipalBounded) {
  SidecarOptions o = Options();
  o.max_streams_per_peer = 2;
  Start(o);
  struct Stream {
    grpc::ClientContext ctx;
    v1::ReportSummary summary;
    std::unique_ptr<grpc::ClientWriter<v1::EventBatch>> writer;
  };
  const auto open = [&](const std::string& token, uint64_t block) {
    auto s = std::make_unique<Stream>();
    WithToken(s->ctx, token);
    s->writer = stub_->ReportEvents(&s->ctx, &s->summary);
    s->writer->Write(BatchOf({EventFor("node-a", block)}));
    return s;
  };
  std::vector<std::unique_ptr<Stream>> held;
  held.push_back(open(kReporter, 1));
  held.push_back(open(kReporter, 2));
  ASSERT_TRUE(WaitUntil([&] { return server_->open_streams() == 2; }));

  auto third = open(kReporter, 3);
  third->writer->WritesDone();
  const grpc::Status refused = third->writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("--max-streams-per-peer"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("principal"), std::string::npos);
  EXPECT_EQ(refused.error_message().find(kReporter), std::string::npos);
  EXPECT_EQ(server_->open_streams(), 2u);

  // Another principal, same loopback address: a slot of its own.
  v1::ReportSummary summary;
  EXPECT_TRUE(ReportAs(kAnyReporter, {BatchOf({EventFor("node-b", 4)})}, &summary).ok());

  held[0]->writer->WritesDone();
  ASSERT_TRUE(held[0]->writer->Finish().ok());
  EXPECT_EQ(held[0]->summary.accepted(), 1u);
  EXPECT_TRUE(ReportAs(kReporter, {BatchOf({EventFor("node-a", 5)})}, &summary).ok());
  EXPECT_NE(Metrics().find("kvlearn_report_streams_peer_refused_total 1\n"), std::string::npos);
  held[1]->writer->WritesDone();
  EXPECT_TRUE(held[1]->writer->Finish().ok());
}

TEST_F(SidecarAuthTest, CallsWithoutAValidTokenAreUnauthenticatedAndCounted) {
  Start(Options());
  for (const std::string token : {"", "not-a-known-token-0001"}) {
    v1::GetStatusResponse status;
    EXPECT_EQ(GetStatus(token, &status).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Admit(token, "node-a").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Reload(token, "m.pt").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ReportSummary summary;
    const grpc::Status report = ReportAs(token, {BatchOf({EventFor("node-a", 1)})}, &summary);
    EXPECT_EQ(report.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(report.error_message().find("authorization: Bearer TOKEN"), std::string::npos)
        << report.error_message();
  }
  // Nothing was applied or logged.
  v1::GetStatusResponse status;
  ASSERT_TRUE(GetStatus(kOperator, &status).ok());
  EXPECT_EQ(status.pools_size(), 0);
  EXPECT_EQ(status.log_next_sequence(), 0u);

  const AccessControl& access = *server_->access_control();
  for (const Rpc rpc : {Rpc::kGetStatus, Rpc::kAdmit, Rpc::kReloadModel, Rpc::kReportEvents}) {
    EXPECT_EQ(access.refusals(rpc, absl::StatusCode::kUnauthenticated), 2u) << RpcName(rpc);
  }
  const std::string metrics = Metrics();
  for (const char* line : {
           "kvlearn_auth_refusals_total{rpc=\"Admit\",code=\"UNAUTHENTICATED\"} 2\n",
           "kvlearn_auth_refusals_total{rpc=\"ReportEvents\",code=\"UNAUTHENTICATED\"} 2\n",
           "kvlearn_auth_refusals_total{rpc=\"Admit\",code=\"PERMISSION_DENIED\"} 0\n",
           "kvlearn_rpcs_total{rpc=\"ReportEvents\",code=\"UNAUTHENTICATED\"} 2\n",
           "kvlearn_auth_principals 3\n",
       }) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line;
  }
}

TEST_F(SidecarAuthTest, AReporterIsDeniedAnotherNodesPoolAndTheOperatorsMethods) {
  Start(Options());
  v1::ReportSummary summary;
  // Its own node: accepted. A second batch naming node-b ends the stream
  // with PERMISSION_DENIED, the first batch logged and nothing of the second.
  const grpc::Status report = ReportAs(
      kReporter,
      {BatchOf({EventFor("node-a", 1)}), BatchOf({EventFor("node-a", 2), EventFor("node-b", 3)})},
      &summary);
  EXPECT_EQ(report.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(report.error_message().find("batch 1: events[1].node_id: this reporter is not bound "
                                        "to node 'node-b'"),
            std::string::npos)
      << report.error_message();
  // A batch numbered as another node's source would suppress that node's batch.
  v1::EventBatch forged = BatchOf({EventFor("node-a", 4)});
  forged.set_source("node-b#TIER_POOL");
  forged.set_batch_id(1);
  EXPECT_EQ(ReportAs(kReporter, {forged}, &summary).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Admit(kReporter, "node-b").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Admit(kReporter, "node-a").ok());
  {
    grpc::ClientContext ctx;
    WithToken(ctx, kReporter);
    v1::DecideRequest r;
    r.add_decisions()->mutable_rank()->set_node_id("node-a");
    r.add_decisions()->mutable_rank()->set_node_id("node-b");
    v1::DecideResponse out;
    const grpc::Status st = stub_->Decide(&ctx, r, &out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(st.error_message().find("decisions[1]"), std::string::npos) << st.error_message();
  }
  v1::GetStatusResponse status;
  EXPECT_EQ(GetStatus(kReporter, &status).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Reload(kReporter, "m.pt").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The operator may not report nor decide.
  EXPECT_EQ(Admit(kOperator, "node-a").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ReportAs(kOperator, {BatchOf({EventFor("node-a", 5)})}, &summary).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Only node-a's pool exists, holding block 1 only (the Admit candidate 7
  // is remembered, not resident); one event was logged.
  ASSERT_TRUE(GetStatus(kOperator, &status).ok());
  ASSERT_EQ(status.pools_size(), 1);
  EXPECT_EQ(status.pools(0).node_id(), "node-a");
  EXPECT_EQ(status.pools(0).resident_blocks(), 1u);
  EXPECT_EQ(status.log_next_sequence(), 1u);

  const AccessControl& access = *server_->access_control();
  EXPECT_EQ(access.refusals(Rpc::kReportEvents, absl::StatusCode::kPermissionDenied), 3u);
  EXPECT_EQ(access.refusals(Rpc::kAdmit, absl::StatusCode::kPermissionDenied), 2u);
  EXPECT_EQ(access.refusals(Rpc::kDecide, absl::StatusCode::kPermissionDenied), 1u);
  EXPECT_EQ(access.refusals(Rpc::kGetStatus, absl::StatusCode::kPermissionDenied), 1u);
  EXPECT_EQ(access.refusals(Rpc::kReloadModel, absl::StatusCode::kPermissionDenied), 1u);
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("kvlearn_auth_refusals_total{rpc=\"ReportEvents\",code=\"PERMISSION_"
                         "DENIED\"} 3\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("kvlearn_auth_refusals_total{rpc=\"ReloadModel\",code=\"PERMISSION_"
                         "DENIED\"} 1\n"),
            std::string::npos);
}

TEST_F(SidecarAuthTest, TheOperatorReloadsModelsFromInsideTheModelDirOnly) {
  const std::string models = files_.File("models");
  std::filesystem::create_directories(models);
  ASSERT_TRUE(CopyTestModel(models + "/first.pt", 1));
  ASSERT_TRUE(CopyTestModel(models + "/second.pt", 2));
  ASSERT_TRUE(CopyTestModel(files_.File("outside.pt"), 2));  // a valid model, outside
  std::filesystem::create_symlink(files_.File("outside.pt"), models + "/escape.pt");

  SidecarOptions o = Options("learned");
  o.model_dir = models;
  o.model_path = files_.File("outside.pt");
  EXPECT_EQ(SidecarServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.model_path = "first.pt";  // relative to --model-dir
  Start(o);
  EXPECT_EQ(server_->policy(), "learned");

  v1::ReloadModelResponse reloaded;
  const grpc::Status inside = Reload(kOperator, "second.pt", &reloaded);
  ASSERT_TRUE(inside.ok()) << inside.error_message();
  EXPECT_NE(reloaded.model_version().find("second.pt"), std::string::npos);
  for (const std::string& path :
       {files_.File("outside.pt"), files_.File("missing.pt"), std::string("/etc/passwd"),
        std::string("../outside.pt"), std::string("escape.pt"), std::string("/")}) {
    const grpc::Status st = Reload(kOperator, path);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << path;
    EXPECT_EQ(st.error_message(), "path: '" + path + "' is outside the server's --model-dir");
  }
  // Inside but missing: said so (the directory is the operator's own).
  EXPECT_EQ(Reload(kOperator, "missing.pt").error_code(), grpc::StatusCode::NOT_FOUND);
  // The model reloaded above still serves.
  v1::GetStatusResponse status;
  ASSERT_TRUE(GetStatus(kOperator, &status).ok());
  EXPECT_EQ(status.model_version(), reloaded.model_version());
}

TEST_F(SidecarAuthTest, TheTokensFileIsReloadedWhenItChangesAndABadOneKeepsTheOld) {
  Start(Options());
  ASSERT_TRUE(Admit(kReporter, "node-a").ok());
  // A stream opened with the token that is about to be revoked: its first
  // batch is applied before the change.
  grpc::ClientContext stream_ctx;
  WithToken(stream_ctx, kReporter);
  v1::ReportSummary summary;
  auto stream = stub_->ReportEvents(&stream_ctx, &summary);
  ASSERT_TRUE(stream->Write(BatchOf({EventFor("node-a", 1)})));
  ASSERT_TRUE(WaitUntil([&] {
    v1::GetStatusResponse status;
    return GetStatus(kOperator, &status).ok() && status.log_next_sequence() == 1;
  }));

  const std::string fresh = "fresh-reporter-token-1";
  WriteFileAtomically(TokensFile(),
                      absl::StrCat(fresh, " reporter node-a\n", kOperator, " operator\n"));
  const AccessControl& access = *server_->access_control();
  ASSERT_TRUE(WaitUntil([&] { return access.reloads_ok() == 1; }));
  EXPECT_EQ(Admit(kReporter, "node-a").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The open stream's next batch meets the new table.
  stream->Write(BatchOf({EventFor("node-a", 2)}));
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::GetStatusResponse status;
  ASSERT_TRUE(GetStatus(kOperator, &status).ok());
  EXPECT_EQ(status.log_next_sequence(), 1u);
  EXPECT_TRUE(Admit(fresh, "node-a").ok());
  EXPECT_EQ(access.principals(), 2u);

  WriteFileAtomically(TokensFile(),
                      absl::StrCat(kOperator, " operator\n", "too-short reporter node-a\n"));
  ASSERT_TRUE(WaitUntil([&] { return access.reloads_failed() == 1; }));
  EXPECT_NE(access.last_reload_error().find(TokensFile() + ":2: "), std::string::npos)
      << access.last_reload_error();
  EXPECT_TRUE(Admit(fresh, "node-a").ok());  // the previous table stays in force
  EXPECT_EQ(access.principals(), 2u);
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("kvlearn_auth_reloads_total{result=\"ok\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvlearn_auth_reloads_total{result=\"error\"} 1\n"), std::string::npos);
}

TEST_F(SidecarAuthTest, ABadTokensFileLineRefusesTheStartNamingFileAndLine) {
  WriteFileAtomically(TokensFile(), absl::StrCat("# ok\n", kOperator, " operator\n",
                                                 "another-token-000001 reporter\n"));
  auto server = SidecarServer::Start(Options());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.status().message().rfind(TokensFile() + ":3: a reporter needs its nodes", 0), 0u)
      << server.status().message();
  SidecarOptions o = Options();
  o.auth_tokens_file = files_.File("missing.txt");
  EXPECT_FALSE(SidecarServer::Start(o).ok());
}

TEST_F(SidecarAuthTest, ANonLoopbackListenAddressNeedsCredentials) {
  SidecarOptions o = TestOptions(data_.path());
  o.metrics_listen = "";
  std::vector<std::string> others = {"0.0.0.0:0"};
  if (const std::string own = OwnNonLoopbackAddress(); !own.empty()) others.push_back(own + ":0");
  for (const std::string& listen : others) {
    o.listen = listen;
    o.auth_tokens_file.clear();
    auto server = SidecarServer::Start(o);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(server.status().message().find("give --auth-tokens FILE"), std::string::npos)
        << server.status().message();
    // Tokens over plaintext: TLS, or saying plaintext is wanted.
    o.auth_tokens_file = TokensFile();
    server = SidecarServer::Start(o);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_NE(server.status().message().find("--allow-insecure-remote"), std::string::npos);
  }
  o.listen = "0.0.0.0:0";
  o.allow_insecure_remote = true;
  EXPECT_TRUE(SidecarServer::Start(o).ok());
  // Loopback needs nothing: a name that resolves to loopback only.
  o = TestOptions(data_.path());
  o.metrics_listen = "";
  o.listen = "localhost:0";
  EXPECT_TRUE(SidecarServer::Start(o).ok());
}

TEST_F(SidecarAuthTest, WithoutAModelDirReloadModelIsOnlyForCallersOnThisMachine) {
  const std::string own = OwnNonLoopbackAddress();
  if (own.empty()) GTEST_SKIP() << "no non-loopback IPv4 address to call from";
  SidecarOptions o = Options();
  o.listen = "0.0.0.0:0";
  o.allow_insecure_remote = true;
  Start(o);
  auto remote = v1::Retention::NewStub(grpc::CreateChannel(
      own + ":" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  WithToken(ctx, kOperator);
  v1::ReloadModelRequest r;
  r.set_path("/etc/passwd");
  v1::ReloadModelResponse out;
  const grpc::Status st = remote->ReloadModel(&ctx, r, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("--model-dir"), std::string::npos) << st.error_message();
  // From loopback it goes on to the load (which refuses the file).
  const grpc::Status local = Reload(kOperator, "/etc/passwd");
  EXPECT_FALSE(local.ok());
  EXPECT_NE(local.error_code(), grpc::StatusCode::PERMISSION_DENIED) << local.error_message();
}

// $KVLEARN_TOKEN, set or unset, before the server starts any thread:
// setenv and unsetenv are not safe while other threads may read the
// environment (gRPC's do), and ctest runs each test in its own process.
TEST_F(SidecarAuthTest, AClientWithoutATokenSendsKvlearnToken) {
  ASSERT_EQ(setenv("KVLEARN_TOKEN", kReporter, 1), 0);
  Start(Options());
  RetentionClient client(NodeAClient());
  EXPECT_FALSE(client.Admit({ClientBlock{11, std::nullopt, 16, 100}}).from_fallback);
  EXPECT_TRUE(client.Stats().sidecar_errors_total.empty());
}

TEST_F(SidecarAuthTest, AClientWithoutATokenOrKvlearnTokenIsUnauthenticated) {
  ASSERT_EQ(unsetenv("KVLEARN_TOKEN"), 0);
  Start(Options());
  RetentionClient client(NodeAClient());
  EXPECT_TRUE(client.Admit({ClientBlock{11, std::nullopt, 16, 100}}).from_fallback);
  EXPECT_EQ(client.Stats().sidecar_errors_total["UNAUTHENTICATED"], 1u);
}

TEST_F(SidecarAuthTest, TheClientsSendTheirToken) {
  Start(Options());
  RetentionClientOptions co = NodeAClient();
  const ClientBlock block{11, std::nullopt, 16, 100};
  {
    co.token = kReporter;
    RetentionClient client(co);
    EXPECT_FALSE(client.Admit({block}).from_fallback);
  }
  {
    co.token = "not-in-the-file";
    RetentionClient client(co);
    EXPECT_TRUE(client.Admit({block}).from_fallback);
    EXPECT_EQ(client.Stats().sidecar_errors_total["UNAUTHENTICATED"], 1u);
    EXPECT_FALSE(client.Stats().breaker_open);
  }

  // kvlearn loadgen with a reporter bound to every node: the whole replay
  // runs, and the policy's name comes from the Admit answers.
  ChatWorkloadOptions w;
  w.requests = 20;
  const Trace trace = GenerateChatTrace(w);
  const CostModel cost(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  LoadgenOptions lo;
  lo.target = co.target;
  lo.pool_bytes = replay->distinct_block_bytes / 10;
  lo.nodes = 2;
  lo.token = kAnyReporter;
  auto got = RunLoadgen(*replay, cost, lo);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->result.requests, 20u);
  EXPECT_EQ(got->result.policy, "lru");
  lo.token = kReporter;  // bound to node-a only, not loadgen-0
  EXPECT_EQ(RunLoadgen(*replay, cost, lo).status().code(), absl::StatusCode::kPermissionDenied);
  lo.token.clear();
  EXPECT_EQ(RunLoadgen(*replay, cost, lo).status().code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace kvlearn
