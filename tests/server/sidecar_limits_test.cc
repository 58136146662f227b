// The sidecar's defenses at the gRPC edge, against a real in-process server
// on a free loopback port: the --max-streams limit on ReportEvents streams,
// idle streams ended after --stream-idle-timeout-seconds, a bounded Shutdown
// with idle streams open, and bytes that are not the method's protobuf
// message (sent with grpc::GenericStub) answered INVALID_ARGUMENT with a
// message and counted in /metrics. The overload test (ctest label overload)
// holds 10,000 idle streams open on the real binary and stops it with
// SIGTERM.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/event_log.h"
#include "tests/server/serve_process.h"
#include "tests/server/sidecar_fixture.h"
#include "tests/support/sanitizer_slowdown.h"

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

// Waits (bounded by `within`) until the server's log holds `n` events.
bool WaitForLogged(v1::Retention::Stub& stub, uint64_t n, std::chrono::seconds within = kGenerous) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < give_up) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    if (stub.GetStatus(&ctx, {}, &st).ok() && st.log_next_sequence() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

std::string Metrics(int port) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  return res ? res->body : "";
}

// One unary call of `method` with raw `bytes` as the request.
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes) {
  // A completion queue drained on this thread, not a callback: the callback
  // would run on a libgrpc thread whose ordering TSan cannot see.
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kGenerous);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = generic.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* got = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&got, &ok));
  EXPECT_EQ(got, reinterpret_cast<void*>(1));
  cq.Shutdown();
  while (cq.Next(&got, &ok)) {
  }
  return status;
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

// Node "ranked" holds block 1, unpinned by a second request: RankEviction on
// it names block 1.
v1::EventBatch RankableNode() {
  v1::EventBatch b;
  *b.add_events() = ArrivalOn("ranked", 1);
  *b.add_events() = StoredOn("ranked", 1);
  *b.add_events() = ArrivalOn("ranked", 2);  // a new request unpins block 1
  return b;
}

// RankEviction on node "ranked" answers, naming block 1.
void ExpectRankEvictionAnswers(v1::Retention::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kGenerous);
  v1::RankRequest rank;
  rank.set_node_id("ranked");
  rank.set_bytes_to_free(1);
  v1::RankResponse victims;
  const grpc::Status s = stub.RankEviction(&ctx, rank, &victims);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(victims.victims_size(), 1);
  EXPECT_EQ(victims.victims(0).block_id(), 1u);
}

// Bytes that cannot parse as any protobuf message: field 1, length 16, but
// only three bytes follow.
const std::string kGarbage(
    "\x0a\x10"
    "abc",
    5);

// Without authentication a peer is an IP address without its port: every
// client on loopback is one peer, here over two channels.
TEST(SidecarLimitsTest, WithoutAuthenticationStreamsPerAddressAreBounded) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.max_streams_per_peer = 2;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  auto other_connection = Connect(server->port());
  std::vector<std::unique_ptr<OpenStream>> open;
  for (int i = 0; i < 2; ++i) {
    v1::EventBatch b;
    *b.add_events() = ArrivalOn("node-" + std::to_string(i), 1);
    open.push_back(Open(*stub, b));
  }
  ASSERT_TRUE(WaitForOpenStreams(*server, 2)) << server->open_streams() << " open";
  v1::ReportSummary summary;
  const grpc::Status refused = Report(*other_connection, {v1::EventBatch()}, &summary);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("this address"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-streams-per-peer"), std::string::npos);
  ASSERT_TRUE(open[0]->Close().ok());
  EXPECT_TRUE(Report(*other_connection, {v1::EventBatch()}, &summary).ok());
  ASSERT_TRUE(open[1]->Close().ok());
}

TEST(SidecarLimitsTest, StreamsOverTheLimitAreResourceExhaustedAndDecisionsStillAnswer) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.max_streams = 8;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, {RankableNode()}, &summary).ok());
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
  ExpectRankEvictionAnswers(*stub);

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

TEST(SidecarLimitsTest, IdleStreamIsEndedWithUnavailableAndItsSlotFreed) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  o.max_streams = 1;
  // Long enough for the first batch to arrive even under ThreadSanitizer on a
  // loaded machine (it once timed out before the batch came).
  o.stream_idle_timeout_seconds = 0.2 * kSanitizerSlowdown;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  v1::EventBatch first;
  *first.add_events() = ArrivalOn("idle", 1);
  *first.add_events() = StoredOn("idle", 1);
  auto idle = Open(*stub, first);
  // Its batch is applied (so the stream was opened), then nothing follows:
  // the server ends it and gives the only slot back.
  ASSERT_TRUE(WaitForLogged(*stub, 2));
  ASSERT_TRUE(WaitForOpenStreams(*server, 0)) << "the idle stream was never ended";
  const grpc::Status ended = idle->Close();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  EXPECT_NE(ended.error_message().find("--stream-idle-timeout-seconds"), std::string::npos)
      << ended.error_message();
  EXPECT_NE(ended.error_message().find("1 complete batches (2 events logged)"), std::string::npos)
      << ended.error_message();

  // Its batch was applied and logged, and the slot serves the next reporter.
  v1::EventBatch next;
  *next.add_events() = ArrivalOn("next", 1);
  v1::ReportSummary summary;
  const grpc::Status reported = Report(*stub, {next}, &summary);
  ASSERT_TRUE(reported.ok()) << reported.error_message();
  EXPECT_EQ(summary.first_sequence(), 2u);

  const std::string metrics = Metrics(server->metrics_port());
  EXPECT_NE(metrics.find("kvlearn_report_streams_idle_closed_total 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvlearn_rpcs_total{rpc=\"ReportEvents\",code=\"UNAVAILABLE\"} 1\n"),
            std::string::npos)
      << metrics;
}

TEST(SidecarLimitsTest, StreamThatKeepsSendingIsNotEndedByTheIdleTimeout) {
  TempDir dir;
  SidecarOptions o = TestOptions(dir.path());
  // Batches 20 ms apart against a 5 s timeout: only a stall 250 times the
  // gap could end this stream.
  o.stream_idle_timeout_seconds = 5;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  grpc::ClientContext ctx;
  v1::ReportSummary summary;
  auto writer = stub->ReportEvents(&ctx, &summary);
  constexpr int kBatches = 20;
  for (int i = 0; i < kBatches; ++i) {
    v1::EventBatch b;
    *b.add_events() = ArrivalOn("busy", static_cast<uint64_t>(i + 1));
    ASSERT_TRUE(writer->Write(b)) << "stream ended at batch " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.batches(), static_cast<uint32_t>(kBatches));
  EXPECT_EQ(summary.accepted(), static_cast<uint64_t>(kBatches));
  EXPECT_NE(Metrics(server->metrics_port()).find("kvlearn_report_streams_idle_closed_total 0\n"),
            std::string::npos);
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
  ASSERT_TRUE(WaitForLogged(*stub, 32));  // every stream's first batch

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

// Threads of process `pid` (/proc/PID/status), 0 if unreadable.
int ThreadsOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  int value = 0;
  while (status >> key) {
    if (key == "Threads:" && status >> value) return value;
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

// The real binary at its stream limit: 10,000 idle ReportEvents streams over
// 8 connections (--max-streams 10000), one more refused, RankEviction still
// answering, no thread per stream, and SIGTERM ending the streams and the
// process (exit 0) with the log released and complete.
TEST(SidecarOverloadTest, TenThousandIdleStreamsStayWithinTheLimitAndSigtermStopsCleanly) {
  constexpr int kStreams = 10'000;
  constexpr int kConnections = 8;
  TempDir dir;
  const std::string data = dir.File("data");
  auto server = std::make_unique<ServeProcess>(
      KVLEARN_BINARY, data,
      std::vector<std::string>{"--max-streams", std::to_string(kStreams), "--max-streams-per-peer",
                               "0", "--shutdown-grace-seconds", "1"});
  ASSERT_GT(server->port(), 0) << "kvlearn serve did not start";
  std::vector<std::unique_ptr<v1::Retention::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("kvlearn.test.connection", c);  // distinct args: a connection each
    stubs.push_back(v1::Retention::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials(), args)));
  }
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stubs[0], {RankableNode()}, &summary).ok());
  const int threads_before = ThreadsOf(server->pid());
  ASSERT_GT(threads_before, 0);

  // Each stream's first batch is one event: the log counts the open streams.
  std::vector<std::unique_ptr<OpenStream>> open;
  open.reserve(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    v1::EventBatch b;
    *b.add_events() = ArrivalOn("node-" + std::to_string(i % 64), static_cast<uint64_t>(i + 1));
    open.push_back(Open(*stubs[i % kConnections], b));
  }
  ASSERT_TRUE(WaitForLogged(*stubs[0], 3u + kStreams, 5 * kGenerous));

  // Stream 10,001 is refused; decisions still answer.
  const grpc::Status refused = Report(*stubs[1], {v1::EventBatch()}, &summary);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-streams"), std::string::npos);
  ExpectRankEvictionAnswers(*stubs[2]);
  // A thread per stream would add 10,000; gRPC's pollers and executors do not
  // grow with streams.
  const int threads_open = ThreadsOf(server->pid());
  EXPECT_LT(threads_open - threads_before, kStreams / 10)
      << threads_before << " threads before, " << threads_open << " with the streams open";

  int wait_status = 0;
  const auto sigterm = std::chrono::steady_clock::now();
  const bool exited = server->SignalAndWait(SIGTERM, kGenerous, &wait_status);
  ASSERT_TRUE(exited) << "kvlearn serve did not stop on SIGTERM with idle streams open";
  // The figures docs/guarantees.md quotes (measured, not asserted).
  std::printf(
      "overload: %d idle streams; server threads %d before, %d with them open; "
      "SIGTERM to exit %.1f s (--shutdown-grace-seconds 1)\n",
      kStreams, threads_before, threads_open,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sigterm).count());
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status;
  for (auto& s : open) EXPECT_FALSE(s->Close().ok());  // ended by the server's shutdown
  // The RocksDB lock is released and every acknowledged event is there.
  auto log = EventLog::Open(data, {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->next_sequence(), 3u + kStreams);
}

}  // namespace
}  // namespace kvlearn
