// Test helpers for the sidecar: a temporary directory, an in-process server
// on a free loopback port, a channel to it, what a pool holds, and a wait.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvlearn/v1/retention.grpc.pb.h"
#include "server/sidecar_server.h"

namespace kvlearn {

// A fresh directory under $TMPDIR, removed with its contents at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvlearn_sidecar_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Polls `done` until it holds (true) or a generous limit has passed (false):
// a loaded machine makes a test slower, not flaky.
inline bool WaitUntil(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline SidecarOptions TestOptions(const std::string& data_dir, const std::string& policy = "lru") {
  SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.data_dir = data_dir;
  o.policy = policy;
  return o;
}

inline std::unique_ptr<SidecarServer> StartServer(const SidecarOptions& options) {
  auto server = SidecarServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

inline std::unique_ptr<v1::Retention::Stub> Connect(int port) {
  return v1::Retention::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

// Sends `batches` on one ReportEvents stream and returns the final status.
inline grpc::Status Report(v1::Retention::Stub& stub, const std::vector<v1::EventBatch>& batches,
                           v1::ReportSummary* summary) {
  grpc::ClientContext ctx;
  auto writer = stub.ReportEvents(&ctx, summary);
  for (const auto& b : batches) {
    if (!writer->Write(b)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// RankEviction of `bytes` on `node`'s pool; expects it to answer.
inline v1::RankResponse RankOn(v1::Retention::Stub& stub, const std::string& node, int64_t bytes) {
  v1::RankRequest r;
  r.set_node_id(node);
  r.set_bytes_to_free(bytes);
  v1::RankResponse out;
  grpc::ClientContext ctx;
  const grpc::Status s = stub.RankEviction(&ctx, r, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

// GetStatus's first pool of `node`, or an empty one when it has none.
inline v1::PoolStatus PoolOf(v1::Retention::Stub& stub, const std::string& node) {
  v1::GetStatusResponse status;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub.GetStatus(&ctx, {}, &status).ok());
  for (const auto& p : status.pools()) {
    if (p.node_id() == node) return p;
  }
  return {};
}

// Expects the (node, tier) pool to hold exactly `resident`: as many resident
// blocks, and a hit on each accepted (a hit on a block not held is refused).
// The hits are logged like any event.
inline void ExpectPoolHolds(v1::Retention::Stub& stub, const std::string& node, v1::Tier tier,
                            const std::vector<uint64_t>& resident) {
  v1::GetStatusResponse status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub.GetStatus(&ctx, {}, &status).ok());
  }
  const v1::PoolStatus* pool = nullptr;
  for (const v1::PoolStatus& p : status.pools()) {
    if (p.node_id() == node && p.tier() == tier) pool = &p;
  }
  ASSERT_NE(pool, nullptr) << "no pool for " << node;
  EXPECT_EQ(pool->resident_blocks(), resident.size());
  v1::EventBatch hits;
  for (const uint64_t id : resident) {
    auto* e = hits.add_events();
    e->set_node_id(node);
    e->set_tier(tier);
    e->mutable_block_hit()->set_block_id(id);
  }
  v1::ReportSummary summary;
  ASSERT_TRUE(Report(stub, {hits}, &summary).ok());
  EXPECT_EQ(summary.accepted(), resident.size());
  EXPECT_EQ(summary.rejected(), 0u);
}

}  // namespace kvlearn
