// Event ingestion through one ReportEvents stream in batches of 256 events,
// including validation, the per-node state update and the RocksDB append
// (one RocksDB entry per EventBatch, through the WAL, no fsync: the default
// durability of `kvlearn serve`, which survives kill -9).
//   build/bench/ingest_bench
// items_per_second is events per second, end to end (client write to summary).
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <filesystem>
#include <vector>

#include "kvlearn/v1/retention.grpc.pb.h"
#include "server/sidecar_server.h"

namespace kvlearn {
namespace {

constexpr int kBatch = 256;
constexpr int kBatchesPerStream = 400;  // 102,400 events per iteration

// A mix for one node: each request arrives with a 4-block chain from a
// working set of 16,384 chains (65,536 blocks, so ids repeat as in real
// traffic), its root is stored and then removed; the rest of each batch is
// transfer-finished events. About a third of the events change pool state.
std::vector<v1::EventBatch> MakeBatches(uint64_t& next_chain) {
  std::vector<v1::EventBatch> out(kBatchesPerStream);
  for (auto& batch : out) {
    while (batch.events_size() + 3 <= kBatch) {
      const uint64_t c = next_chain++;
      const uint64_t base = (c % 16384) * 4;
      v1::Event* a = batch.add_events();
      a->set_node_id("ingest");
      a->set_timestamp_us(static_cast<int64_t>(c));
      for (uint64_t i = 0; i < 4; ++i) a->mutable_request_arrival()->add_block_ids(base + i);
      v1::Event* s = batch.add_events();
      s->set_node_id("ingest");
      s->set_timestamp_us(static_cast<int64_t>(c));
      auto* st = s->mutable_block_stored();
      st->set_block_id(base);
      st->set_tokens(512);
      st->set_bytes(512 * 131072);
      v1::Event* r = batch.add_events();
      r->set_node_id("ingest");
      r->set_timestamp_us(static_cast<int64_t>(c));
      r->mutable_block_removed()->set_block_id(base);
    }
    while (batch.events_size() < kBatch) {
      v1::Event* t = batch.add_events();
      t->set_node_id("ingest");
      auto* tf = t->mutable_transfer_finished();
      tf->set_src("p1");
      tf->set_dst("pool");
      tf->set_bytes(65536);
      tf->set_microseconds(3);
    }
  }
  return out;
}

void BM_IngestOneStream(benchmark::State& state) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_ingest_XXXXXX").string();
  const std::string dir = mkdtemp(tmpl.data());
  SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.data_dir = dir;
  o.policy = "lru";
  auto server = SidecarServer::Start(o);
  if (!server.ok()) {
    state.SkipWithError("server did not start");
    return;
  }
  auto stub = v1::Retention::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  uint64_t next_chain = 0;
  int64_t events = 0;
  std::vector<v1::EventBatch> batches;
  for (auto _ : state) {
    state.PauseTiming();
    batches = MakeBatches(next_chain);  // building and freeing batches is not timed
    state.ResumeTiming();
    v1::ReportSummary summary;
    grpc::ClientContext ctx;
    auto w = stub->ReportEvents(&ctx, &summary);
    for (const auto& b : batches) w->Write(b);
    w->WritesDone();
    if (!w->Finish().ok() || summary.rejected() > 0) {
      state.SkipWithError("ingestion failed");
      break;
    }
    events += static_cast<int64_t>(summary.accepted());
  }
  state.SetItemsProcessed(events);
  server->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_IngestOneStream)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvlearn

BENCHMARK_MAIN();
