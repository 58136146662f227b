// The size limits of server/request_validation.h through the RPCs of a real
// in-process server: a block of more than 1 TiB and a pool of more than
// 1 EiB are INVALID_ARGUMENT naming the field (before the limits,
// bytes = INT64_MAX was accepted and resident byte totals overflowed), while
// the limits themselves are accepted and sum exactly.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "server/request_validation.h"
#include "tests/server/sidecar_fixture.h"

namespace kvlearn {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

v1::Event Base(const std::string& node) {
  v1::Event e;
  e.set_node_id(node);
  e.set_tier(v1::TIER_POOL);
  e.set_timestamp_us(1000);
  return e;
}

v1::Event Stored(const std::string& node, uint64_t id, std::optional<uint64_t> parent,
                 int64_t bytes) {
  v1::Event e = Base(node);
  auto* s = e.mutable_block_stored();
  s->set_block_id(id);
  if (parent) s->set_parent_id(*parent);
  s->set_tokens(512);
  s->set_bytes(bytes);
  return e;
}

v1::Event PoolConfigured(const std::string& node, int64_t capacity) {
  v1::Event e = Base(node);
  e.mutable_pool_configured()->set_capacity_bytes(capacity);
  return e;
}

class SidecarSizeLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(TestOptions(dir_.path()));
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  v1::ReportSummary ReportOne(v1::Event event) {
    v1::EventBatch batch;
    *batch.add_events() = std::move(event);
    v1::ReportSummary summary;
    const grpc::Status s = Report(*stub_, {batch}, &summary);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return summary;
  }

  // The event is refused with INVALID_ARGUMENT and a message naming `field`.
  void ExpectInvalid(v1::Event event, const std::string& field) {
    const v1::ReportSummary s = ReportOne(std::move(event));
    EXPECT_EQ(s.accepted(), 0u);
    ASSERT_EQ(s.rejections_size(), 1) << "accepted: " << field;
    EXPECT_EQ(s.rejections(0).code(), "INVALID_ARGUMENT") << s.rejections(0).message();
    EXPECT_NE(s.rejections(0).message().find(field + ":"), std::string::npos)
        << s.rejections(0).message();
  }

  void ExpectAccepted(v1::Event event) {
    const v1::ReportSummary s = ReportOne(std::move(event));
    EXPECT_EQ(s.accepted(), 1u);
    for (const auto& r : s.rejections()) ADD_FAILURE() << r.message();
  }

  v1::GetStatusResponse Status() {
    grpc::ClientContext ctx;
    v1::GetStatusResponse r;
    EXPECT_TRUE(stub_->GetStatus(&ctx, {}, &r).ok());
    return r;
  }

  TempDir dir_;
  std::unique_ptr<SidecarServer> server_;
  std::unique_ptr<v1::Retention::Stub> stub_;
};

TEST_F(SidecarSizeLimitsTest, BlockStoredBytesOverOneTebibyteAreInvalidArgument) {
  ExpectInvalid(Stored("n", 1, std::nullopt, kInt64Max), "block_stored.bytes");
  ExpectInvalid(Stored("n", 1, std::nullopt, kMaxBlockBytes + 1), "block_stored.bytes");
  ExpectAccepted(Stored("n", 1, std::nullopt, kMaxBlockBytes));
}

TEST_F(SidecarSizeLimitsTest, BlockStoredTokensOverTheLimitAreInvalidArgument) {
  v1::Event e = Stored("n", 1, std::nullopt, 100);
  e.mutable_block_stored()->set_tokens(kInt64Max);
  ExpectInvalid(e, "block_stored.tokens");
}

TEST_F(SidecarSizeLimitsTest, RequestArrivalBlockBytesOverTheLimitAreInvalidArgument) {
  v1::Event e = Base("n");
  auto* a = e.mutable_request_arrival();
  a->add_block_ids(1);
  a->add_block_ids(2);
  a->add_block_bytes(100);
  a->add_block_bytes(kInt64Max);
  ExpectInvalid(e, "request_arrival.block_bytes[1]");
}

TEST_F(SidecarSizeLimitsTest, RequestArrivalBlockTokensThatDoNotFit32BitsAreInvalidArgument) {
  // 2^32 + 5 tokens: under the 1 TiB size limit, but a block's token count
  // is 32 bits wide; it must not wrap to 5.
  v1::Event e = Base("n");
  auto* a = e.mutable_request_arrival();
  a->add_block_ids(1);
  a->add_block_tokens((int64_t{1} << 32) + 5);
  ExpectInvalid(e, "request_arrival.block_tokens[0]");
}

TEST_F(SidecarSizeLimitsTest, PoolCapacityOverOneExbibyteIsInvalidArgument) {
  ExpectInvalid(PoolConfigured("n", kInt64Max), "pool_configured.capacity_bytes");
  ExpectInvalid(PoolConfigured("n", kMaxPoolBytes + 1), "pool_configured.capacity_bytes");
  ExpectAccepted(PoolConfigured("n", kMaxPoolBytes));
}

TEST_F(SidecarSizeLimitsTest, AdmitCandidateBytesOverTheLimitAreInvalidArgument) {
  v1::AdmitRequest r;
  r.set_node_id("n");
  auto* c = r.add_candidates();
  c->set_block_id(1);
  c->set_tokens(512);
  c->set_bytes(kInt64Max);
  grpc::ClientContext ctx;
  v1::AdmitResponse response;
  const grpc::Status s = stub_->Admit(&ctx, r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("candidates[0].bytes:"), std::string::npos) << s.error_message();
}

TEST_F(SidecarSizeLimitsTest, ResidentBytesAtTheBlockLimitSumExactly) {
  // 64 chains of 16 blocks of 1 TiB on each of 4 nodes: 2^52 bytes per node,
  // 2^54 in all; nothing may wrap.
  constexpr int kNodes = 4, kChains = 64, kDepth = 16;
  for (int n = 0; n < kNodes; ++n) {
    const std::string node = "node-" + std::to_string(n);
    std::vector<v1::EventBatch> batches(1);
    for (int c = 0; c < kChains; ++c) {
      std::optional<uint64_t> parent;
      for (int d = 0; d < kDepth; ++d) {
        const uint64_t id = static_cast<uint64_t>(c) * 1000 + d + 1;
        *batches[0].add_events() = Stored(node, id, parent, kMaxBlockBytes);
        parent = id;
      }
    }
    v1::ReportSummary summary;
    ASSERT_TRUE(Report(*stub_, batches, &summary).ok());
    ASSERT_EQ(summary.accepted(), uint64_t{kChains} * kDepth);
  }
  const v1::GetStatusResponse status = Status();
  ASSERT_EQ(status.pools_size(), kNodes);
  uint64_t total = 0;
  for (const auto& p : status.pools()) {
    EXPECT_EQ(p.resident_bytes(), uint64_t{kChains} * kDepth * kMaxBlockBytes) << p.node_id();
    total += p.resident_bytes();
  }
  EXPECT_EQ(total, uint64_t{kNodes} * kChains * kDepth * kMaxBlockBytes);
}

}  // namespace
}  // namespace kvlearn
