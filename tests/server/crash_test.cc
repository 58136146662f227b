// Crash test (ctest -L crash): 20 rounds of kill -9 of a real `kvlearn serve`
// (learned policy), each while a call is in flight: even rounds during an
// event batch (ReportEvents), odd rounds during a model reload (ReloadModel,
// alternating two model files). After each kill the server restarts on the
// same directory, and the test checks that no acknowledged batch or reload
// was lost (log_next_sequence, model_version). The call in flight at the kill
// may have taken effect or not; the restarted server says which, and that is
// what a never-killed reference server is then given. At the end both are
// asked the same questions (GetStatus of every pool, RankEviction, Admit, a
// full drain: tests/server/restart_compare.h) and must answer identically.
// The killed server snapshots every 100 events and compacts past 256
// ghosts (both servers alike), so restarts load snapshots with every policy
// state in them and the histories hold compactions; at least one restart
// must have loaded a snapshot.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/restart_compare.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

constexpr int kRounds = 20;
constexpr uint64_t kChains = 400;  // working set of 4-block chains per node
constexpr uint64_t kGhostBlocks = 256;

// One operation of the client: an event batch or a model reload.
struct Op {
  bool reload = false;
  std::string model;     // reload: the file
  v1::EventBatch batch;  // else
};

uint64_t Lcg(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

// Batch `i`: 12 requests on one node, each a 4-block chain from the working
// set stored root first, with a hit on a stored root and the removal of an
// older chain's blocks, leaf first. Some events are refused (a hit on a block
// not stored, a removal of one never seen): both servers refuse them alike.
v1::EventBatch MakeBatch(uint64_t i) {
  uint64_t state = i + 1;
  v1::EventBatch batch;
  const std::string node = "loadgen-" + std::to_string(i % kNodes);
  const int64_t t = static_cast<int64_t>(i) * 100'000;
  auto event = [&]() {
    v1::Event* e = batch.add_events();
    e->set_node_id(node);
    e->set_timestamp_us(t + batch.events_size());
    return e;
  };
  for (int r = 0; r < 12; ++r) {
    const uint64_t chain = Lcg(state) % kChains;
    const uint64_t base = chain * 4 + 1;
    auto* a = event()->mutable_request_arrival();
    for (uint64_t k = 0; k < 4; ++k) a->add_block_ids(base + k);
    event()->mutable_block_hit()->set_block_id(base);
    for (uint64_t k = 0; k < 4; ++k) {
      auto* s = event()->mutable_block_stored();
      s->set_block_id(base + k);
      if (k > 0) s->set_parent_id(base + k - 1);
      s->set_tokens(512);
      s->set_bytes(static_cast<int64_t>(DefaultCost().BytesForTokens(512)));
    }
    const uint64_t old = (Lcg(state) % kChains) * 4 + 1;
    for (uint64_t k = 4; k-- > 0;) event()->mutable_block_removed()->set_block_id(old + k);
  }
  return batch;
}

// Runs `op`; true when the server acknowledged it.
bool RunOp(v1::Retention::Stub& stub, const Op& op, std::string* version) {
  if (op.reload) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ReloadModelRequest r;
    r.set_path(op.model);
    v1::ReloadModelResponse out;
    if (!stub.ReloadModel(&ctx, r, &out).ok()) return false;
    *version = out.model_version();
    return true;
  }
  v1::ReportSummary summary;
  return Report(stub, {op.batch}, &summary).ok();
}

std::string ModelOf(v1::Retention::Stub& stub) {
  grpc::ClientContext ctx;
  v1::GetStatusResponse st;
  EXPECT_TRUE(stub.GetStatus(&ctx, {}, &st).ok());
  return st.model_version();
}

TEST(CrashTest, KillNineDuringIngestionAndModelReloadLosesNothingAcknowledged) {
  TempDir dir;
  const std::string first = dir.File("first.pt"), second = dir.File("second.pt");
  ASSERT_TRUE(CopyTestModel(first, 1));
  ASSERT_TRUE(CopyTestModel(second, 2));
  SidecarOptions ro = TestOptions(dir.File("reference"), "learned");
  ro.metrics_listen = "";
  ro.model_path = first;
  ro.ghost_blocks = kGhostBlocks;  // the killed server's --ghost-blocks
  auto reference = StartServer(ro);
  ASSERT_NE(reference, nullptr);
  ASSERT_EQ(reference->policy(), "learned") << reference->startup_notes();
  auto ref = Connect(reference->port());
  // Snapshots every 100 events and compactions past 256 ghosts, so restarts
  // load snapshots taken between kills and pools compact along the way; the
  // reference compacts at the same points (they count events, not time).
  const std::vector<std::string> args = {"--policy",
                                         "learned",
                                         "--model",
                                         first,
                                         "--snapshot-every-events",
                                         "100",
                                         "--ghost-blocks",
                                         std::to_string(kGhostBlocks)};

  uint64_t next_batch = 0;
  int kills_in_batch = 0, kills_in_reload = 0, in_flight_applied = 0, from_snapshot = 0;
  auto server = std::make_unique<ServeProcess>(KVLEARN_BINARY, dir.File("data"), args);
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_GT(server->port(), 0) << "round " << round << ": kvlearn serve did not start";
    auto stub = Connect(server->port());
    // The restarted server is where the reference is.
    ASSERT_EQ(PoolsOf(*stub), PoolsOf(*ref)) << "round " << round;

    // Two batches (over 100 accepted events), then a pause of three ticks of
    // the snapshot thread (it looks every 100 ms), so a snapshot is written
    // for the restart to load.
    for (int k = 0; k < 2; ++k) {
      Op op;
      op.batch = MakeBatch(next_batch++);
      std::string v;
      ASSERT_TRUE(RunOp(*stub, op, &v)) << "round " << round;
      ASSERT_TRUE(RunOp(*ref, op, &v)) << "round " << round;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));

    // Back-to-back calls until the kill, so one is always in flight:
    // batches, and in odd rounds a reload after each (alternating the two
    // files) and only reloads after call `victim`, so a reload is in flight
    // whenever it finishes before the kill. The kill comes 0-0.5 ms after
    // call `victim` (a batch, or a reload in odd rounds) starts.
    const bool reload_round = round % 2 == 1;
    bool to_second = ModelOf(*ref).find("second.pt@") == std::string::npos;
    std::vector<Op> ops;
    uint64_t seed = 1000 + round;
    size_t victim = Lcg(seed) % 6 + 2;
    if (reload_round && victim % 2 == 0) ++victim;  // odd calls are the reloads
    const auto delay = std::chrono::microseconds(Lcg(seed) % 500);
    auto next_op = [&] {
      Op op;
      if (reload_round && (ops.size() % 2 == 1 || ops.size() > victim)) {
        op.reload = true;
        op.model = to_second ? second : first;
        to_second = !to_second;
      } else {
        op.batch = MakeBatch(next_batch++);
      }
      return op;
    };
    std::atomic<size_t> started{0};
    std::thread killer([&] {
      while (started.load() <= victim) std::this_thread::yield();
      std::this_thread::sleep_for(delay);
      server->Kill(SIGKILL);
    });
    size_t acked = 0;
    bool reference_refused = false;
    std::string version;
    for (size_t i = 0; i < 100'000; ++i) {
      ops.push_back(next_op());
      started.store(i + 1);
      if (!RunOp(*stub, ops[i], &version)) break;
      acked = i + 1;
      // Acknowledged: the reference gets it too.
      std::string ref_version;
      if (!RunOp(*ref, ops[i], &ref_version)) reference_refused = true;
    }
    started.store(SIZE_MAX);  // a call failed early: release the killer anyway
    killer.join();
    ASSERT_FALSE(reference_refused) << "round " << round;
    ASSERT_LT(acked, ops.size()) << "round " << round << ": every call finished before the kill";
    const Op& in_flight = ops[acked];
    (in_flight.reload ? kills_in_reload : kills_in_batch)++;

    // Restart; the call in flight took effect if the restarted server's log
    // is longer (a batch) or its model differs (a reload) than the
    // reference's. Anything shorter or other is a lost acknowledged call.
    const std::string err = dir.File("restart-" + std::to_string(round) + ".err");
    server = std::make_unique<ServeProcess>(KVLEARN_BINARY, dir.File("data"), args, err);
    ASSERT_GT(server->port(), 0) << "round " << round << ": no restart after kill -9";
    // It prints this before the port, so the file has it by now.
    std::ifstream in(err);
    const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (said.find("loaded the pools' snapshot") != std::string::npos) ++from_snapshot;
    auto again = Connect(server->port());
    grpc::ClientContext c1, c2;
    v1::GetStatusResponse now, want;
    ASSERT_TRUE(again->GetStatus(&c1, {}, &now).ok());
    ASSERT_TRUE(ref->GetStatus(&c2, {}, &want).ok());
    ASSERT_GE(now.log_next_sequence(), want.log_next_sequence())
        << "round " << round << ": acknowledged events lost";
    const bool applied = in_flight.reload ? now.model_version() != want.model_version()
                                          : now.log_next_sequence() > want.log_next_sequence();
    if (applied) {
      ++in_flight_applied;
      std::string ref_version;
      ASSERT_TRUE(RunOp(*ref, in_flight, &ref_version));
    }
  }
  ASSERT_GT(server->port(), 0);
  auto stub = Connect(server->port());
  std::printf(
      "crash test: %d kills during a batch, %d during a reload; the call in flight "
      "took effect %d times; %d restarts loaded a snapshot\n",
      kills_in_batch, kills_in_reload, in_flight_applied, from_snapshot);
  EXPECT_EQ(kills_in_batch + kills_in_reload, kRounds);
  EXPECT_GT(kills_in_reload, 0);
  EXPECT_GT(from_snapshot, 0) << "no restart exercised a snapshot";
  ExpectSameAnswers(*ref, *stub, 64 << 20);
}

}  // namespace
}  // namespace kvlearn
