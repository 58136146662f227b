// Test helpers for the sidecar: a temporary directory, an in-process server
// on a free loopback port, and a channel to it.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

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

}  // namespace kvlearn
