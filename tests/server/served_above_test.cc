// request_arrival.served_above over gRPC: a node whose own prefix cache
// serves what returns soon tells the sidecar, and `learned` values a new
// block by the reuse the pool would serve (docs/learned_policy.md, "Served
// shares by idle time"); a count past the chain is refused naming the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/server/sidecar_fixture.h"
#include "tests/support/test_model.h"

namespace kvlearn {
namespace {

v1::Event Arrival(const std::string& node, int64_t time_us, const std::vector<uint64_t>& chain,
                  uint32_t served_above) {
  v1::Event e;
  e.set_node_id(node);
  e.set_timestamp_us(time_us);
  auto* a = e.mutable_request_arrival();
  for (const uint64_t b : chain) {
    a->add_block_ids(b);
    a->add_block_tokens(512);
    a->add_block_bytes(1 << 20);
  }
  a->set_served_above(served_above);
  return e;
}

class ServedAboveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SidecarOptions o = TestOptions(dir_.path(), "learned-model");
    o.metrics_listen = "";
    o.model_path = dir_.File("model.pt");
    ASSERT_TRUE(CopyTestModel(o.model_path, 2));  // seed 1's curve is near 0 here
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  v1::ReportSummary Send(const v1::EventBatch& batch) {
    v1::ReportSummary summary;
    EXPECT_TRUE(Report(*stub_, {batch}, &summary).ok());
    return summary;
  }

  // The admission score of block 3 under block 2 on `node`.
  double ScoreOfANewBlock(const std::string& node, int64_t time_us) {
    v1::AdmitRequest r;
    r.set_node_id(node);
    r.set_timestamp_us(time_us);
    auto* c = r.add_candidates();
    c->set_block_id(3);
    c->set_parent_id(2);
    c->set_tokens(512);
    c->set_bytes(1 << 20);
    v1::AdmitResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->Admit(&ctx, r, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out.decisions_size() == 1 ? out.decisions(0).score() : 0;
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

// Both nodes see the chain [1, 2] come back every second, twenty times; on
// "front" the node's own cache served every return. Then a request needs
// [1, 2, 3], block 3 new, and the node asks to admit it. Test model 2's
// reuse curve has mass below its first rung (60 s), where all those returns
// fell, so front's pool counts that mass at a share of about 2 / (2 + 19)
// and no more: its P(E), and with it the score P(E) (R - T) - T of a block
// whose recompute R exceeds its load T, is lower than alone's, which counts
// it whole (nothing is evicted: no space price). With the count ignored the
// two scores are equal.
TEST_F(ServedAboveTest, APoolBehindANodesCacheValuesOnlyWhatItWouldServe) {
  v1::EventBatch batch;
  for (int k = 0; k < 20; ++k) {
    const int64_t t = int64_t{k} * 1'000'000;
    *batch.add_events() = Arrival("front", t, {1, 2}, k == 0 ? 0 : 2);
    *batch.add_events() = Arrival("alone", t, {1, 2}, 0);
  }
  *batch.add_events() = Arrival("front", 20'000'000, {1, 2, 3}, 2);
  *batch.add_events() = Arrival("alone", 20'000'000, {1, 2, 3}, 0);
  const v1::ReportSummary summary = Send(batch);
  ASSERT_EQ(summary.rejected(), 0u)
      << (summary.rejections_size() ? summary.rejections(0).message() : "");
  const double front = ScoreOfANewBlock("front", 20'000'000);
  const double alone = ScoreOfANewBlock("alone", 20'000'000);
  EXPECT_LT(front, alone);
}

TEST_F(ServedAboveTest, MoreThanTheChainIsRefusedNamingTheField) {
  v1::EventBatch batch;
  *batch.add_events() = Arrival("n", 0, {1, 2}, 3);
  const v1::ReportSummary summary = Send(batch);
  ASSERT_EQ(summary.rejected(), 1u);
  ASSERT_EQ(summary.rejections_size(), 1);
  EXPECT_NE(summary.rejections(0).message().find("request_arrival.served_above"), std::string::npos)
      << summary.rejections(0).message();
}

}  // namespace
}  // namespace kvlearn
