// The sidecar's defenses at the gRPC edge, against a real in-process server
// on a free loopback port: the --max-streams limit on ReportEvents streams,
// a bounded Shutdown with idle streams open, and bytes that are not the
// method's protobuf message (sent with grpc::GenericStub) answered
// INVALID_ARGUMENT with a message and counted in /metrics.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/event_log.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr auto kGenerous = std::chrono::seconds(60);  // failure timeout only

v1::Event ArrivalOn(const std::string& node, uint64_t id) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(v1::TIER_POOL);
  e.set_timestamp_us(1000);
  auto* a = e.mutable_request_arrival();
  a->add_block_ids(id);
  a->add_block_tokens(4);
  a->add_block_bytes(100);
  a->set_input_length(4);
  return e;
}

v1::Event StoredOn(const std::string& node, uint64_t id) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(v1::TIER_POOL);
  e.set_timestamp_us(1000);
  auto* s = e.mutable_block_stored();
  s->set_block_id(id);
  s->set_tokens(4);
  s->set_bytes(100);
  return e;
}

// A ReportEvents stream that stays open until Close (or the server ends it).
struct OpenStream {
  grpc::ClientContext ctx;
  v1::ReportSummary summary;
  std::unique_ptr<grpc::ClientWriter<v1::EventBatch>> writer;

  grpc::Status Close() {
    writer->WritesDone();
    return writer->Finish();
  }
};

std::unique_ptr<OpenStream> Open(v1::Retention::Stub& stub, const v1::EventBatch& first) {
  auto s = std::make_unique<OpenStream>();
  s->writer = stub.ReportEvents(&s->ctx, &s->summary);
  s->writer->Write(first);
  return s;
}

// Waits (bounded) until the server counts `n` open streams.
bool WaitForOpenStreams(const SidecarServer& server, uint32_t n) {
  const auto give_up = std::chrono::steady_clock::now() + kGenerous;
  while (server.open_streams() != n) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

std::string Metrics(int port) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  return res ? res->body : "";
}

// One unary call of `method` with raw `bytes` as the request.
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kGenerous);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

// A ReportEvents stream carrying `messages` as raw bytes, one per message.
grpc::Status RawStream(const std::shared_ptr<grpc::Channel>& channel,
                       const std::vector<std::string>& messages) {
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kGenerous);
  auto call = generic.PrepareCall(&ctx, "/kvlearn.v1.Retention/ReportEvents", &cq);
  auto step = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(got), tag);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  intptr_t tag = 2;
  for (const std::string& m : messages) {
    grpc::Slice slice(m);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(tag));
    if (!step(tag++)) break;  // the server ended the call
  }
  call->WritesDone(reinterpret_cast<void*>(tag));
  step(tag++);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(tag));
  step(tag);
  cq.Shutdown();
  return status;
}

// Bytes that cannot parse as any protobuf message: field 1, length 16, but
// only three bytes follow.
const std::string kGarbage(
    "\x0a\x10"
    "abc",
    5);

TEST(SidecarLimitsTest, StreamsOverTheLimitAreResourceExhaustedAndDecisionsStillAnswer) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.max_streams = 8;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  // A node with an unpinned block, to rank while the streams are open.
  v1::EventBatch ranked;
  *ranked.add_events() = ArrivalOn("ranked", 1);
  *ranked.add_events() = StoredOn("ranked", 1);
  *ranked.add_events() = ArrivalOn("ranked", 2);  // a new request unpins block 1
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, {ranked}, &summary).ok());
  ASSERT_EQ(summary.accepted(), 3u);
  ASSERT_TRUE(WaitForOpenStreams(*server, 0));

  std::vector<std::unique_ptr<OpenStream>> open;
  for (int i = 0; i < 8; ++i) {
    v1::EventBatch b;
    *b.add_events() = ArrivalOn("node-" + std::to_string(i), 1);
    *b.add_events() = StoredOn("node-" + std::to_string(i), 1);
    open.push_back(Open(*stub, b));
  }
  ASSERT_TRUE(WaitForOpenStreams(*server, 8)) << server->open_streams() << " open";

  // The ninth is refused, naming the flag.
  const grpc::Status refused = Report(*stub, {v1::EventBatch()}, &summary);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-streams"), std::string::npos)
      << refused.error_message();

  // Decisions still answer while the streams are open.
  {
    grpc::ClientContext ctx;
    v1::RankRequest rank;
    rank.set_node_id("ranked");
    rank.set_bytes_to_free(1);
    v1::RankResponse victims;
    const grpc::Status s = stub->RankEviction(&ctx, rank, &victims);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(victims.victims_size(), 1);
    EXPECT_EQ(victims.victims(0).block_id(), 1u);
  }

  // Closing one frees its slot by the time the client has the answer (no
  // wait needed); its batch was logged and summarized.
  const grpc::Status closed = open[0]->Close();
  ASSERT_TRUE(closed.ok()) << closed.error_message();
  EXPECT_EQ(open[0]->summary.accepted(), 2u);
  v1::EventBatch again;
  *again.add_events() = ArrivalOn("node-9", 1);
  ASSERT_TRUE(Report(*stub, {again}, &summary).ok());
  EXPECT_EQ(summary.accepted(), 1u);

  const std::string metrics = Metrics(server->metrics_port());
  EXPECT_NE(metrics.find("kvlearn_report_streams_refused_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(
      metrics.find("kvlearn_rpcs_total{rpc=\"ReportEvents\",code=\"RESOURCE_EXHAUSTED\"} 1\n"),
      std::string::npos)
      << metrics;
  for (size_t i = 1; i < open.size(); ++i) EXPECT_TRUE(open[i]->Close().ok());
}

TEST(SidecarLimitsTest, ShutdownWithIdleStreamsOpenFinishesAndReleasesTheLog) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.shutdown_grace_seconds = 0.2;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  std::vector<std::unique_ptr<OpenStream>> open;
  for (int i = 0; i < 32; ++i) {
    v1::EventBatch b;
    *b.add_events() = ArrivalOn("node-" + std::to_string(i), 1);
    open.push_back(Open(*stub, b));
  }
  ASSERT_TRUE(WaitForOpenStreams(*server, 32));
  // Every stream's first batch is logged (bounded wait).
  for (auto give_up = std::chrono::steady_clock::now() + kGenerous;;) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    ASSERT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
    if (st.log_next_sequence() == 32) break;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << st.log_next_sequence();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  // Idle streams never end by themselves; Shutdown must end them.
  auto stopped = std::async(std::launch::async, [&server] { server->Shutdown(); });
  const bool finished = stopped.wait_for(kGenerous) == std::future_status::ready;
  EXPECT_TRUE(finished) << "Shutdown did not return with idle streams open";
  if (!finished) {
    for (auto& s : open) s->ctx.TryCancel();  // let the test end
  }
  stopped.wait();
  for (auto& s : open) {
    const grpc::Status st = s->Close();
    EXPECT_FALSE(st.ok());  // cancelled by the server's shutdown
  }
  // The RocksDB lock is released: the log opens again, with every logged
  // event.
  auto log = EventLog::Open(dir.path(), {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_sequence(), 32u);
}

TEST(SidecarLimitsTest, GarbageRequestsAreInvalidArgumentWithAMessageAndCounted) {
  TempDir dir;
  auto server = StartServer(TestOptions(dir.path()));
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  const std::pair<const char*, const char*> methods[] = {
      {"/kvlearn.v1.Retention/Admit", "kvlearn.v1.AdmitRequest"},
      {"/kvlearn.v1.Retention/RankEviction", "kvlearn.v1.RankRequest"},
      {"/kvlearn.v1.Retention/GetStatus", "kvlearn.v1.GetStatusRequest"},
      {"/kvlearn.v1.Retention/ReloadModel", "kvlearn.v1.ReloadModelRequest"}};
  for (const auto& [method, type] : methods) {
    const grpc::Status s = RawUnary(channel, method, kGarbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(type), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("request"), std::string::npos) << s.error_message();
  }
  // The server still serves the real message.
  v1::AdmitRequest admit;
  admit.set_node_id("n");
  auto* c = admit.add_candidates();
  c->set_block_id(1);
  c->set_tokens(4);
  c->set_bytes(100);
  EXPECT_TRUE(RawUnary(channel, "/kvlearn.v1.Retention/Admit", admit.SerializeAsString()).ok());

  const std::string metrics = Metrics(server->metrics_port());
  EXPECT_NE(metrics.find("kvlearn_malformed_messages_total{rpc=\"Admit\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvlearn_rpcs_total{rpc=\"Admit\",code=\"INVALID_ARGUMENT\"} 1\n"),
            std::string::npos)
      << metrics;
}

TEST(SidecarLimitsTest, MalformedBatchEndsTheStreamWithInvalidArgumentNamingTheBatch) {
  TempDir dir;
  auto server = StartServer(TestOptions(dir.path()));
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  v1::EventBatch first, third;
  *first.add_events() = ArrivalOn("node-a", 1);
  *first.add_events() = StoredOn("node-a", 1);
  *third.add_events() = ArrivalOn("node-b", 7);
  const grpc::Status s =
      RawStream(channel, {first.SerializeAsString(), kGarbage, third.SerializeAsString()});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("batch 1"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("kvlearn.v1.EventBatch"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("2 events) were logged"), std::string::npos)
      << s.error_message();

  // Batch 0 is applied and logged; nothing after the bad batch is.
  auto stub = Connect(server->port());
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  ASSERT_TRUE(stub->GetStatus(&ctx, {}, &status).ok());
  EXPECT_EQ(status.log_next_sequence(), 2u);
  ASSERT_EQ(status.pools_size(), 1);
  EXPECT_EQ(status.pools(0).node_id(), "node-a");
  EXPECT_EQ(status.pools(0).resident_blocks(), 1u);

  const std::string metrics = Metrics(server->metrics_port());
  EXPECT_NE(metrics.find("kvlearn_malformed_messages_total{rpc=\"ReportEvents\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvlearn_rpcs_total{rpc=\"ReportEvents\",code=\"INVALID_ARGUMENT\"} 1\n"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace kvlearn
