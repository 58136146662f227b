// Every resource a reporter can make the sidecar hold is bounded, each bound
// set small by its flag here, against a real in-process server: requests in
// flight per pool (--max-requests-in-flight), blocks they pin per pool
// (--max-pinned-blocks), a request that never finishes (released after
// --request-timeout-seconds of the pool's event clock), nodes
// (--max-nodes), and string fields. Each refusal is RESOURCE_EXHAUSTED (or
// INVALID_ARGUMENT for a string's format), counted in /metrics, and a
// restart rebuilds no more than the bounds allow.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/request_validation.h"
#include "tests/server/metrics_scrape.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr int64_t kSecond = 1'000'000;  // microseconds

v1::Event Base(const std::string& node, int64_t timestamp_us, v1::Tier tier = v1::TIER_POOL) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(tier);
  e.set_timestamp_us(timestamp_us);
  return e;
}

// A request arrival of blocks first..first+n-1 (new ids: a chain of its own).
v1::Event Arrival(const std::string& id, uint64_t first, int n, int64_t timestamp_us,
                  const std::string& node = "n") {
  v1::Event e = Base(node, timestamp_us);
  auto* a = e.mutable_request_arrival();
  for (int i = 0; i < n; ++i) {
    a->add_block_ids(first + static_cast<uint64_t>(i));
    a->add_block_tokens(16);
    a->add_block_bytes(1000);
  }
  a->set_request_id(id);
  return e;
}

v1::Event Finished(const std::string& id, int64_t timestamp_us) {
  v1::Event e = Base("n", timestamp_us);
  e.mutable_request_finished()->set_request_id(id);
  return e;
}

class RequestBoundsTest : public ::testing::Test {
 protected:
  void Start() {
    server_ = StartServer(options_);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }
  void Restart() {
    stub_.reset();
    server_.reset();
    Start();
  }

  // Sends `events` as one batch; returns the codes of the refused ones, in
  // order ("" for accepted ones).
  std::vector<std::string> Send(const std::vector<v1::Event>& events) {
    v1::EventBatch batch;
    for (const v1::Event& e : events) *batch.add_events() = e;
    v1::ReportSummary summary;
    EXPECT_TRUE(Report(*stub_, {batch}, &summary).ok());
    std::vector<std::string> codes(events.size());
    for (const auto& r : summary.rejections()) codes[r.event()] = r.code();
    return codes;
  }
  std::string SendOne(const v1::Event& e) { return Send({e})[0]; }

  v1::PoolStatus Pool(const std::string& node = "n") { return PoolOf(*stub_, node); }
  int Pools() {
    v1::GetStatusResponse status;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetStatus(&ctx, {}, &status).ok());
    return status.pools_size();
  }
  uint64_t Metric(const std::string& name) { return ScrapeCounter(server_->metrics_port(), name); }

  TempDir dir_;
  SidecarOptions options_ = TestOptions(dir_.path());
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

TEST_F(RequestBoundsTest, RequestsInFlightOverTheBoundAreResourceExhausted) {
  options_.max_requests_in_flight = 3;
  Start();
  EXPECT_EQ(Send({Arrival("a", 100, 1, 1), Arrival("b", 200, 1, 2), Arrival("c", 300, 1, 3),
                  Arrival("d", 400, 1, 4)}),
            (std::vector<std::string>{"", "", "", "RESOURCE_EXHAUSTED"}));
  EXPECT_EQ(Pool().requests_in_flight(), 3u);
  // One ends: room for one more.
  EXPECT_EQ(Send({Finished("b", 5), Arrival("d", 400, 1, 6), Arrival("e", 500, 1, 7)}),
            (std::vector<std::string>{"", "", "RESOURCE_EXHAUSTED"}));
  EXPECT_EQ(Metric("kvlearn_requests_refused_in_flight_total"), 2u);
}

TEST_F(RequestBoundsTest, PinnedBlocksOverTheBoundAreResourceExhausted) {
  options_.max_pinned_blocks = 100;
  Start();
  // 60 + 60 would pin 120; 60 + 40 pins exactly the bound.
  EXPECT_EQ(Send({Arrival("a", 1000, 60, 1), Arrival("b", 2000, 60, 2), Arrival("c", 3000, 40, 3)}),
            (std::vector<std::string>{"", "RESOURCE_EXHAUSTED", ""}));
  EXPECT_EQ(Pool().requests_in_flight(), 2u);
  EXPECT_EQ(SendOne(Arrival("d", 4000, 1, 4)), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(Send({Finished("a", 5), Arrival("b", 2000, 60, 6)}),
            (std::vector<std::string>{"", ""}));
  EXPECT_EQ(Metric("kvlearn_requests_refused_pinned_blocks_total"), 2u);
}

TEST_F(RequestBoundsTest, ARequestThatNeverFinishesIsReleasedAtTheTimeout) {
  options_.request_timeout_seconds = 10;
  Start();
  // "a" arrives at 0 s and stores its two blocks; it never finishes.
  v1::Event s1 = Base("n", 0);
  s1.mutable_block_stored()->set_block_id(1);
  s1.mutable_block_stored()->set_tokens(16);
  s1.mutable_block_stored()->set_bytes(1000);
  v1::Event s2 = s1;
  s2.mutable_block_stored()->set_block_id(2);
  s2.mutable_block_stored()->set_parent_id(1);
  EXPECT_EQ(Send({Arrival("a", 1, 2, 0), s1, s2}), (std::vector<std::string>{"", "", ""}));
  // Held: a drain proposes nothing.
  const auto drain = [&] { return RankOn(*stub_, "n", int64_t{1} << 30).victims_size(); };
  EXPECT_EQ(drain(), 0);
  // Another request at 10 s: "a" is exactly 10 s old, still in flight.
  EXPECT_EQ(SendOne(Arrival("b", 10, 1, 10 * kSecond)), "");
  EXPECT_EQ(Pool().requests_in_flight(), 2u);
  EXPECT_EQ(drain(), 0);
  // Past 10 s "a" is released: its blocks can go, its finish comes too late.
  EXPECT_EQ(SendOne(Finished("b", 10 * kSecond + 1)), "");
  EXPECT_EQ(Pool().requests_in_flight(), 0u);
  EXPECT_EQ(Metric("kvlearn_requests_expired_total"), 1u);
  EXPECT_EQ(SendOne(Finished("a", 10 * kSecond + 2)), "NOT_FOUND");
  // A restart replays the release at the same event (the event clock).
  Restart();
  EXPECT_EQ(Pool().requests_in_flight(), 0u);
  EXPECT_EQ(drain(), 2);
}

TEST_F(RequestBoundsTest, RequestsThatNeverFinishKeepMemoryWithinTheBounds) {
  // The attack, scaled down: arrivals of many new ids that never
  // finish. With the timeout they are released as the clock moves; the
  // pool then remembers at most its ghosts plus what is pinned.
  options_.ghost_blocks = 1000;
  options_.max_pinned_blocks = 2000;
  options_.request_timeout_seconds = 5;
  Start();
  constexpr int kChain = 300;  // 1 s apart, 5 s timeout: at most 6 in flight, 1800 pinned
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(SendOne(Arrival(absl::StrCat("r", i), 1'000'000u * (i + 1), kChain, i * kSecond)), "")
        << "arrival " << i;
    const v1::PoolStatus p = Pool();
    ASSERT_LE(p.requests_in_flight(), 6u) << "arrival " << i;
    // Compaction keeps ghosts under the bound, pins keep their chains.
    ASSERT_LE(p.blocks_tracked(), options_.ghost_blocks + options_.max_pinned_blocks)
        << "arrival " << i;
  }
  EXPECT_EQ(Metric("kvlearn_requests_expired_total"), 50u - Pool().requests_in_flight());
}

TEST_F(RequestBoundsTest, NodesOverTheCapAreResourceExhaustedAlsoAfterARestart) {
  options_.max_nodes = 3;
  Start();
  // n1 on two tiers is one node.
  v1::Event hbm = Arrival("x", 7, 1, 1, "n1");
  hbm.set_tier(v1::TIER_HBM);
  EXPECT_EQ(Send({Arrival("a", 1, 1, 1, "n1"), hbm, Arrival("a", 1, 1, 1, "n2"),
                  Arrival("a", 1, 1, 1, "n3"), Arrival("a", 1, 1, 1, "n4")}),
            (std::vector<std::string>{"", "", "", "", "RESOURCE_EXHAUSTED"}));
  {
    v1::AdmitRequest r;
    r.set_node_id("n5");
    auto* c = r.add_candidates();
    c->set_block_id(1);
    c->set_tokens(16);
    c->set_bytes(1000);
    v1::AdmitResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->Admit(&ctx, r, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-nodes"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Pools(), 4);
  EXPECT_EQ(Metric("kvlearn_nodes"), 3u);
  EXPECT_EQ(Metric("kvlearn_nodes_refused_total"), 2u);
  Restart();
  EXPECT_EQ(Pools(), 4);
  EXPECT_EQ(SendOne(Arrival("b", 2, 1, 2, "n6")), "RESOURCE_EXHAUSTED");
  // A lower cap at a restart rebuilds no more nodes than it allows (the
  // first ones, in the log's order).
  options_.max_nodes = 2;
  Restart();
  EXPECT_EQ(Metric("kvlearn_nodes"), 2u);
  EXPECT_EQ(Pool("n3").node_id(), "");
}

// Every string field a client sends is capped at kMaxStringFieldBytes
// (fixed, server/request_validation.h): one byte over is INVALID_ARGUMENT
// naming the field and counted in kvlearn_string_fields_refused_total, the
// cap itself is accepted, and other format errors of the same fields are
// refused without being counted there.
TEST_F(RequestBoundsTest, StringFieldsOverTheCapAreInvalidArgumentAndCounted) {
  Start();
  const std::string at_cap(kMaxStringFieldBytes, 's');
  const std::string over(kMaxStringFieldBytes + 1, 's');
  // Events: each with one field at the cap, then the same one byte over
  // (setting another kind of event replaces the arrival).
  struct Case {
    std::string field;
    std::function<void(v1::Event&, const std::string&)> set;
  };
  const std::vector<Case> cases = {
      {"node_id", [](v1::Event& e, const std::string& v) { e.set_node_id(v); }},
      {"request_arrival.request_id",
       [](v1::Event& e, const std::string& v) { e.mutable_request_arrival()->set_request_id(v); }},
      {"request_finished.request_id",
       [](v1::Event& e, const std::string& v) { e.mutable_request_finished()->set_request_id(v); }},
      {"transfer_finished.src",
       [](v1::Event& e, const std::string& v) { e.mutable_transfer_finished()->set_src(v); }},
      {"transfer_finished.dst",
       [](v1::Event& e, const std::string& v) { e.mutable_transfer_finished()->set_dst(v); }},
      {"batch_received.source",
       [](v1::Event& e, const std::string& v) {
         e.mutable_batch_received()->set_batch_id(1);
         e.mutable_batch_received()->set_source(v);
       }},
  };
  uint64_t refused = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].field);
    v1::EventBatch batch;
    for (const std::string* value : {&at_cap, &over}) {
      v1::Event e = Arrival("r", 1000 + 10 * i, 1, 1);
      cases[i].set(e, *value);
      *batch.add_events() = e;
    }
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*stub_, {batch}, &summary).ok());
    ASSERT_EQ(summary.rejections_size(), 1) << summary.DebugString();
    EXPECT_EQ(summary.rejections(0).event(), 1u) << "the value at the cap was refused";
    EXPECT_EQ(summary.rejections(0).code(), "INVALID_ARGUMENT");
    EXPECT_NE(summary.rejections(0).message().find(cases[i].field + ": must be"), std::string::npos)
        << summary.rejections(0).message();
    ++refused;
    EXPECT_EQ(Metric("kvlearn_string_fields_refused_total"), refused);
  }
  // Other format errors of the same fields are not this bound's.
  v1::Event bad_char = Arrival("r", 2000, 1, 1, "no spaces");
  v1::Event empty_id = Finished("", 2);
  EXPECT_EQ(Send({bad_char, empty_id}),
            (std::vector<std::string>{"INVALID_ARGUMENT", "INVALID_ARGUMENT"}));
  EXPECT_EQ(Metric("kvlearn_string_fields_refused_total"), refused);
  // A call naming a node over the cap.
  {
    v1::RankRequest r;
    r.set_node_id(over);
    r.set_bytes_to_free(1);
    v1::RankResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->RankEviction(&ctx, r, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("node_id: must be"), std::string::npos) << s.error_message();
    EXPECT_EQ(Metric("kvlearn_string_fields_refused_total"), ++refused);
  }
  // A batch whose source is over the cap ends its stream, nothing applied.
  {
    v1::EventBatch batch;
    batch.set_source(over);
    batch.set_batch_id(7);
    *batch.add_events() = Arrival("q", 3000, 1, 1);
    v1::ReportSummary summary;
    const grpc::Status s = Report(*stub_, {batch}, &summary);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("source: must be"), std::string::npos) << s.error_message();
    EXPECT_EQ(Metric("kvlearn_string_fields_refused_total"), ++refused);
  }
}

}  // namespace
}  // namespace kvlearn
