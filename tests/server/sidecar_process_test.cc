// Runs the real `kvlearn serve` binary: kill -9 during ingestion then restart
// with every acknowledged event in the log; export-log of the request
// arrivals back to a Mooncake trace; SIGHUP without a model keeps serving.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "clients/load_generator.h"
#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"
#include "server/event_log.h"
#include "server/model_loader.h"
#include "sim/pool_simulator.h"
#include "tests/server/serve_process.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

v1::Event ArrivalEvent(uint64_t id, int64_t ts_us) {
  v1::Event e;
  e.set_node_id("node-a");
  e.set_tier(v1::TIER_POOL);
  e.set_timestamp_us(ts_us);
  e.mutable_request_arrival()->add_block_ids(id);
  e.mutable_request_arrival()->set_input_length(512);
  return e;
}

// Creates one pool on the server (node "node-a") with a request arrival.
void ReportSummaryForNode(v1::Retention::Stub& stub) {
  v1::EventBatch b;
  *b.add_events() = ArrivalEvent(1, 0);
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(stub, {b}, &summary).ok());
}

TEST(SidecarProcessTest, KillNineDuringIngestionLosesNoAcknowledgedEvent) {
  TempDir dir;
  auto server = std::make_unique<ServeProcess>(KVLEARN_BINARY, dir.path());
  ASSERT_GT(server->port(), 0) << "kvlearn serve did not start";
  auto stub = Connect(server->port());

  // One sender: every call is two batches of 50 events; remember what each
  // acknowledged call was given.
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> acked;  // sequence, serialized event
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    uint64_t next_id = 1;
    for (int call = 0; call < 100'000 && !stop; ++call) {
      std::vector<v1::EventBatch> batches(2);
      std::vector<std::string> sent;
      for (auto& b : batches) {
        for (int i = 0; i < 50; ++i) {
          *b.add_events() = ArrivalEvent(next_id, static_cast<int64_t>(next_id) * 1000);
          sent.push_back(b.events(b.events_size() - 1).SerializeAsString());
          ++next_id;
        }
      }
      v1::ReportSummary summary;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      auto writer = stub->ReportEvents(&ctx, &summary);
      for (const auto& b : batches) writer->Write(b);
      writer->WritesDone();
      if (!writer->Finish().ok()) break;  // the server died
      ASSERT_EQ(summary.accepted(), sent.size());
      ASSERT_EQ(summary.last_sequence() - summary.first_sequence() + 1, sent.size());
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < sent.size(); ++i) {
        acked.emplace_back(summary.first_sequence() + i, std::move(sent[i]));
      }
    }
  });
  // Kill once a few thousand events are acknowledged (bounded wait).
  for (int i = 0; i < 6000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() >= 3000) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int status = server->Kill(SIGKILL);
  stop = true;
  sender.join();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_GE(acked.size(), 3000u);

  // Restart on the same directory: the log continues after what was written.
  server = std::make_unique<ServeProcess>(KVLEARN_BINARY, dir.path());
  ASSERT_GT(server->port(), 0) << "kvlearn serve did not restart";
  {
    auto restarted = Connect(server->port());
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    ASSERT_TRUE(restarted->GetStatus(&ctx, {}, &st).ok());
    EXPECT_GE(st.log_next_sequence(), acked.back().first + 1);
  }
  server->Kill(SIGTERM);

  auto log = EventLog::OpenReadOnly(dir.path());
  ASSERT_TRUE(log.ok()) << log.status();
  size_t next = 0, missing = 0;
  ASSERT_TRUE((*log)
                  ->ForEach([&](uint64_t seq, std::string_view value) {
                    while (next < acked.size() && acked[next].first < seq) {
                      ++missing;
                      ++next;
                    }
                    if (next < acked.size() && acked[next].first == seq) {
                      EXPECT_EQ(value, acked[next].second) << "sequence " << seq;
                      ++next;
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  missing += acked.size() - next;
  EXPECT_EQ(missing, 0u) << "acknowledged events missing from the log after kill -9";
}

TEST(SidecarProcessTest, ExportLogWritesTheRequestArrivalsAsAMooncakeTrace) {
  TempDir dir;
  const std::string data = dir.File("data");
  ChatWorkloadOptions w;
  w.requests = 40;
  const Trace trace = GenerateChatTrace(w);

  ServeProcess server(KVLEARN_BINARY, data);
  ASSERT_GT(server.port(), 0);
  auto stub = Connect(server.port());
  v1::EventBatch batch;
  for (const TraceRequest& r : trace.requests) {
    v1::Event* e = batch.add_events();
    e->set_node_id("node-a");
    e->set_timestamp_us(r.timestamp_ms * 1000);
    auto* a = e->mutable_request_arrival();
    for (uint64_t id : trace.BlocksOf(r)) a->add_block_ids(id);
    a->set_input_length(r.input_length);
    a->set_output_length(r.output_length);
    // Non-arrival events are skipped by the export.
    v1::Event* t = batch.add_events();
    t->set_node_id("node-a");
    t->mutable_transfer_finished()->set_bytes(10);
  }
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(*stub, {batch}, &summary).ok());
  ASSERT_EQ(summary.accepted(), 2 * trace.requests.size());

  // SIGHUP without --model: a message, and the server keeps serving.
  kill(server.pid(), SIGHUP);
  {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    EXPECT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
  }

  // Exported while the server runs (read-only open).
  const std::string out = dir.File("exported.jsonl");
  const std::string cmd = std::string(KVLEARN_BINARY) + " export-log --data-dir " + data +
                          " --out " + out + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto back = ReadMooncakeTrace(out, {});
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->requests.size(), trace.requests.size());
  EXPECT_EQ(back->hash_ids, trace.hash_ids);
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    EXPECT_EQ(back->requests[i].timestamp_ms, trace.requests[i].timestamp_ms);
    EXPECT_EQ(back->requests[i].input_length, trace.requests[i].input_length);
    EXPECT_EQ(back->requests[i].output_length, trace.requests[i].output_length);
  }
  EXPECT_EQ(WEXITSTATUS(server.Kill(SIGTERM)), 0);
}

// Reload: a model trained by `kvlearn train` loads, swaps and is reported; a
// bad file is refused and the old model keeps serving; a policy without a
// model refuses. Then the learned policy behind the sidecar makes exactly the
// simulator's decisions.
TEST(SidecarModelTest, ReloadSwapsAValidModelAndRefusesBadOnes) {
  TempDir dir;
  ChatWorkloadOptions w;
  w.seed = 11;
  w.requests = 400;
  const Trace trace = GenerateChatTrace(w);
  const std::string trace_path = dir.File("train.jsonl");
  ASSERT_TRUE(WriteMooncakeTrace(trace, trace_path).ok());
  const std::string model = dir.File("model.pt");
  // --force: this test reloads the file whatever train's verdict on it.
  const std::string cmd = std::string(KVLEARN_BINARY) + " train --trace " + trace_path + " --out " +
                          model + " --epochs 2 --force >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  SidecarOptions o = TestOptions(dir.File("data"), "");
  o.metrics_listen = "";
  o.model_path = model;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->policy(), "learned") << server->startup_notes();
  auto stub = Connect(server->port());
  auto status = [&] {
    grpc::ClientContext ctx;
    v1::GetStatusResponse st;
    EXPECT_TRUE(stub->GetStatus(&ctx, {}, &st).ok());
    return st;
  };
  const std::string version = status().model_version();
  EXPECT_NE(version.find("model.pt"), std::string::npos) << version;

  auto reload = [&](const std::string& path, v1::ReloadModelResponse* resp) {
    grpc::ClientContext ctx;
    v1::ReloadModelRequest req;
    req.set_path(path);
    return stub->ReloadModel(&ctx, req, resp);
  };
  // A copy of the same model under another name: a new version.
  const std::string copy = dir.File("model-v2.pt");
  std::filesystem::copy_file(model, copy);
  v1::ReloadModelResponse resp;
  const grpc::Status ok = reload(copy, &resp);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_NE(resp.model_version().find("model-v2.pt"), std::string::npos);
  EXPECT_EQ(status().model_version(), resp.model_version());

  const std::string garbage = dir.File("garbage.pt");
  std::ofstream(garbage) << "not a model";
  const grpc::Status bad = reload(garbage, &resp);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find(garbage), std::string::npos) << bad.error_message();
  EXPECT_EQ(status().model_version(), resp.model_version());  // the old one still serves
  EXPECT_EQ(status().policy(), "learned");

  // lru has no model to swap.
  SidecarOptions lru = TestOptions(dir.File("data-lru"), "lru");
  lru.metrics_listen = "";
  auto lru_server = StartServer(lru);
  ASSERT_NE(lru_server, nullptr);
  ReportSummaryForNode(*Connect(lru_server->port()));
  auto refused = lru_server->ReloadModel(model);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();

  // loadgen == compare for the learned policy too.
  const CostModel cost(*FindModelProfile("llama3-8b"), *FindHardwareProfile("a100"));
  auto replay = BuildReplayTrace(trace, cost);
  ASSERT_TRUE(replay.ok());
  auto loaded = LoadModelForServing(model);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  PoolReplayOptions sim;
  sim.pool_bytes = replay->distinct_block_bytes / 20;
  sim.model = *loaded;
  auto expected = ReplayPool(*replay, cost, "learned", sim);
  ASSERT_TRUE(expected.ok()) << expected.status();
  SidecarOptions fresh = TestOptions(dir.File("data-eq"), "learned");
  fresh.metrics_listen = "";
  fresh.model_path = model;
  auto eq_server = StartServer(fresh);
  ASSERT_NE(eq_server, nullptr);
  LoadgenOptions lo;
  lo.target = "127.0.0.1:" + std::to_string(eq_server->port());
  lo.pool_bytes = sim.pool_bytes;
  auto got = RunLoadgen(*replay, cost, lo);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->result.block_hits, expected->block_hits);
  EXPECT_EQ(got->result.admitted_bytes, expected->admitted_bytes);
  EXPECT_EQ(got->result.evicted_blocks, expected->evicted_blocks);
}

}  // namespace
}  // namespace kvlearn
