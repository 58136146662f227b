// Regression tests of issue 13 ("Harden the sidecar"), each against a real
// in-process server on free loopback ports:
//  - Admit under `learned` for a pool that saw no request_arrival (and for a
//    known node's other tier, and a candidate outside the announced chain)
//    used to read past the policy's per-block table: segfault;
//  - under `kvlearn-cars`, a block_stored before any request_arrival wrote
//    past the policy's per-block windows (found by fuzzing): segfault;
//  - a second server on a port in use used to start too (SO_REUSEPORT) and
//    split the traffic silently;
//  - /metrics used to serve one idle connection at a time per worker, for up
//    to 5 s each, so a few dozen idle connections timed it out; then clients
//    trickling header bytes held its 32 workers for as long as they liked;
//  - a second server on a taken /metrics port bound it too (httplib's
//    SO_REUSEPORT), and scrapes alternated between the two processes.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/sidecar_fixture.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

v1::Event Arrival(const std::string& node, v1::Tier tier, const std::vector<uint64_t>& ids) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(tier);
  e.set_timestamp_us(1000);
  auto* a = e.mutable_request_arrival();
  for (uint64_t id : ids) a->add_block_ids(id);
  a->set_input_length(512 * static_cast<int64_t>(ids.size()));
  return e;
}

v1::AdmitRequest AdmitChain(const std::string& node, v1::Tier tier,
                            const std::vector<uint64_t>& ids, std::optional<uint64_t> parent) {
  v1::AdmitRequest r;
  r.set_node_id(node);
  r.set_tier(tier);
  r.set_timestamp_us(2000);
  for (uint64_t id : ids) {
    auto* c = r.add_candidates();
    c->set_block_id(id);
    if (parent) c->set_parent_id(*parent);
    c->set_tokens(512);
    c->set_bytes(64 << 20);
    parent = id;
  }
  return r;
}

// A sidecar serving `learned` with the small test model written to a file.
class LearnedSidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model = dir_.File("model.pt");
    ASSERT_TRUE(CopyTestModel(model));
    SidecarOptions o = TestOptions(dir_.File("data"), "learned");
    o.model_path = model;
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    ASSERT_EQ(server_->policy(), "learned") << server_->startup_notes();
    stub_ = Connect(server_->port());
  }

  // Admit must answer (one decision per candidate) and the server must live on.
  void ExpectAdmitAnswers(const v1::AdmitRequest& request) {
    grpc::ClientContext ctx;
    v1::AdmitResponse response;
    const grpc::Status s = stub_->Admit(&ctx, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.policy(), "learned");
    EXPECT_EQ(response.decisions_size(), request.candidates_size());
    grpc::ClientContext status_ctx;
    v1::GetStatusResponse status;
    ASSERT_TRUE(stub_->GetStatus(&status_ctx, {}, &status).ok());
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

TEST_F(LearnedSidecarTest, AdmitOnAPoolThatSawNoRequestArrivalAnswers) {
  ExpectAdmitAnswers(AdmitChain("fresh-node", v1::TIER_POOL, {11, 12, 13}, std::nullopt));
}

TEST_F(LearnedSidecarTest, AdmitOnAnotherTierOfAKnownNodeAnswers) {
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub_, {}, &summary).ok());
  v1::EventBatch batch;
  *batch.add_events() = Arrival("node-a", v1::TIER_POOL, {1, 2, 3});
  ASSERT_TRUE(Report(*stub_, {batch}, &summary).ok());
  ASSERT_EQ(summary.accepted(), 1u);
  ExpectAdmitAnswers(AdmitChain("node-a", v1::TIER_POOL, {1, 2, 3}, std::nullopt));
  ExpectAdmitAnswers(AdmitChain("node-a", v1::TIER_HBM, {1, 2}, std::nullopt));
}

TEST_F(LearnedSidecarTest, AdmitOfBlocksOutsideTheAnnouncedChainAnswers) {
  v1::EventBatch batch;
  *batch.add_events() = Arrival("node-b", v1::TIER_POOL, {1, 2});
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub_, {batch}, &summary).ok());
  ASSERT_EQ(summary.accepted(), 1u);
  // Blocks 3.. were never announced: they join the catalog only now.
  ExpectAdmitAnswers(AdmitChain("node-b", v1::TIER_POOL, {3, 4, 5, 6}, 2));
}

// Found by fuzz/sidecar_handlers_fuzzer: kvlearn-cars sized its per-block
// windows only at request_arrival, so a block_stored on a fresh pool wrote
// past their end.
TEST(SidecarPolicyTest, KvlearnCarsStoreBeforeAnyRequestArrivalIsApplied) {
  TempDir dir;
  auto server = StartServer(TestOptions(dir.path(), "kvlearn-cars"));
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  v1::EventBatch batch;
  for (uint64_t id : {1, 2}) {
    v1::Event* e = batch.add_events();
    e->set_node_id("fresh-node");
    e->set_tier(v1::TIER_POOL);
    e->set_timestamp_us(1000);
    auto* s = e->mutable_block_stored();
    s->set_block_id(id);
    if (id == 2) s->set_parent_id(1);
    s->set_tokens(512);
    s->set_bytes(64 << 20);
  }
  // Another request then unpins them (stored blocks stay pinned until the
  // node's next request).
  *batch.add_events() = Arrival("fresh-node", v1::TIER_POOL, {7});
  v1::ReportSummary summary;
  const grpc::Status s = Report(*stub, {batch}, &summary);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.accepted(), 3u);
  grpc::ClientContext ctx;
  v1::RankRequest rank;
  rank.set_node_id("fresh-node");
  rank.set_bytes_to_free(1);
  v1::RankResponse response;
  ASSERT_TRUE(stub->RankEviction(&ctx, rank, &response).ok());
  ASSERT_EQ(response.victims_size(), 1);
  EXPECT_EQ(response.victims(0).block_id(), 2u);  // the leaf
}

TEST(SidecarPortTest, SecondServerOnAPortInUseRefusesToStartNamingThePort) {
  TempDir dir;
  auto first = StartServer(TestOptions(dir.File("first")));
  ASSERT_NE(first, nullptr);
  const std::string port = std::to_string(first->port());
  SidecarOptions o = TestOptions(dir.File("second"));  // its own log: only the port is shared
  o.listen = "127.0.0.1:" + port;
  auto second = SidecarServer::Start(o);
  ASSERT_FALSE(second.ok()) << "a second server started on port " << port;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("--listen"), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find(port), std::string::npos) << second.status();
  // The first one still serves.
  auto stub = Connect(first->port());
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  EXPECT_TRUE(stub->GetStatus(&ctx, {}, &status).ok());
}

// A TCP connection that sends nothing.
int OpenIdleConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /metrics on a fresh connection; the whole response, or "" if none came
// within `timeout_s` (a failure timeout, not a measurement).
std::string GetMetrics(int port, int timeout_s) {
  const int fd = OpenIdleConnection(port);
  if (fd < 0) return "";
  timeval tv{};
  tv.tv_sec = timeout_s;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::string response;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

TEST(SidecarMetricsTest, MetricsAnswersWhileManyIdleConnectionsAreOpen) {
  TempDir dir;
  auto server = StartServer(TestOptions(dir.path()));
  ASSERT_NE(server, nullptr);
  // Before the fix 8 workers held each idle connection for 5 s: 128 of them
  // kept a request waiting for ~80 s. Now 32 workers hold one for 1 s: ~4 s.
  constexpr int kIdle = 128;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = OpenIdleConnection(server->metrics_port());
    ASSERT_GE(fd, 0) << "connection " << i;
    // Paced, so that httplib's accept queue (backlog 5) keeps up: a burst
    // would have SYNs dropped and retried a second later, and the early
    // connections would time out before the last ones are open.
    usleep(2000);
    idle.push_back(fd);
  }
  const std::string response = GetMetrics(server->metrics_port(), 60);
  for (int fd : idle) close(fd);
  ASSERT_FALSE(response.empty()) << "no answer to GET /metrics within 60 s";
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response.substr(0, 200);
  EXPECT_NE(response.find("kvlearn_pools "), std::string::npos);
}

TEST(SidecarMetricsTest, SecondServerOnATakenMetricsPortRefusesToStartNamingIt) {
  TempDir dir;
  auto first = StartServer(TestOptions(dir.File("first")));
  ASSERT_NE(first, nullptr);
  const std::string port = std::to_string(first->metrics_port());
  SidecarOptions o = TestOptions(dir.File("second"));  // its own log and gRPC port
  o.metrics_listen = "127.0.0.1:" + port;
  auto second = SidecarServer::Start(o);
  ASSERT_FALSE(second.ok()) << "a second server started on metrics port " << port;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("--metrics-listen"), std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("127.0.0.1:" + port), std::string::npos)
      << second.status();
  // Every scrape reaches the first one (it has the pool; a second process
  // would answer kvlearn_pools 0).
  auto stub = Connect(first->port());
  v1::EventBatch batch;
  *batch.add_events() = Arrival("n", v1::TIER_POOL, {1});
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, {batch}, &summary).ok());
  for (int i = 0; i < 4; ++i) {
    const std::string response = GetMetrics(first->metrics_port(), 60);
    EXPECT_NE(response.find("\nkvlearn_pools 1\n"), std::string::npos) << response.substr(0, 200);
  }
}

TEST(SidecarMetricsTest, ScrapesAnswerWhileClientsTrickleHeaderBytes) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.metrics_max_connections = 16;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  // 64 connections, each sending a request one byte at a time, as the
  // attack that held httplib's 32 workers (a byte every 1.5 s there).
  constexpr int kSlow = 64;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = OpenIdleConnection(server->metrics_port());
    ASSERT_GE(fd, 0) << "connection " << i;
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    for (size_t i = 0; !stop.load() && i < request.size(); i = (i + 1) % (request.size() - 1)) {
      for (int fd : slow) send(fd, &request[i], 1, MSG_NOSIGNAL);
      usleep(100'000);
    }
  });
  const std::string response = GetMetrics(server->metrics_port(), 60);
  stop = true;
  trickle.join();
  for (int fd : slow) close(fd);
  ASSERT_FALSE(response.empty()) << "no answer to GET /metrics within 60 s";
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response.substr(0, 200);
  // 64 connections for 16 places: at least 48 were closed to make room.
  const std::string name = "\nkvlearn_metrics_connections_cut_total ";
  const size_t at = response.find(name);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stoull(response.substr(at + name.size())), uint64_t{kSlow - 16});
}

TEST(SidecarMetricsTest, AConnectionIsClosedAtItsDeadlineAnsweredOrNot) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.metrics_request_timeout_seconds = 0.2;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const int fd = OpenIdleConnection(server->metrics_port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "GET /met", 8, MSG_NOSIGNAL), 8);
  timeval tv{};
  tv.tv_sec = 60;  // a failure timeout: the server closes it after 0.2 s
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[64];
  EXPECT_EQ(recv(fd, buf, sizeof(buf), 0), 0) << "the server did not close the connection";
  close(fd);
  // A whole request still gets its answer.
  EXPECT_EQ(GetMetrics(server->metrics_port(), 60).rfind("HTTP/1.1 200", 0), 0u);
}

}  // namespace
}  // namespace kvlearn
