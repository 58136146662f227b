// `kvlearn ctl`: asks a running sidecar over its gRPC API, without writing a
// client: status (policy, model, log), pools (one line per node and tier), and
// reload MODEL (ReloadModel). A sidecar that does not answer within
// --timeout-seconds gets one line naming the address and exit status 1.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "kvlearn/v1/retention.grpc.pb.h"

namespace kvlearn {
namespace {

struct CtlFlags {
  std::string target = "127.0.0.1:50051";
  std::string token;
  double timeout_seconds = 3;
  std::string model;  // reload
};

int Fail(const std::string& what) {
  std::cerr << "kvlearn ctl: " << what << "\n";
  return 1;
}

// The call's context: deadline, waiting for a server that is starting, token.
std::unique_ptr<grpc::ClientContext> Context(const CtlFlags& f) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(f.timeout_seconds * 1000)));
  ctx->set_wait_for_ready(true);
  if (!f.token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", f.token));
  return ctx;
}

int FailRpc(const CtlFlags& f, const std::string& rpc, const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Fail(absl::StrFormat(
        "cannot reach %s (no answer to %s in %g s): is `kvlearn serve` running there?", f.target,
        rpc, f.timeout_seconds));
  }
  return Fail(absl::StrCat(rpc, ": ", s.error_message()));
}

std::unique_ptr<v1::Retention::Stub> Stub(const CtlFlags& f) {
  return v1::Retention::NewStub(grpc::CreateChannel(f.target, grpc::InsecureChannelCredentials()));
}

int RunStatusOrPools(const CtlFlags& f, bool pools) {
  v1::GetStatusResponse r;
  const grpc::Status s = Stub(f)->GetStatus(Context(f).get(), {}, &r);
  if (!s.ok()) return FailRpc(f, "GetStatus", s);
  if (!pools) {
    std::cout << absl::StrFormat(
        "target %s\npolicy %s\nmodel %s\nuptime %.1f s\nevents logged %d (since start)\n"
        "log next sequence %d, about %.1f MB\npools %d\n",
        f.target, r.policy(), r.model_version().empty() ? "(none)" : r.model_version(),
        r.uptime_seconds(), r.events_logged(), r.log_next_sequence(), r.log_bytes() / 1e6,
        r.pools_size());
    return 0;
  }
  std::cout << absl::StrFormat("%-20s %-6s %12s %12s %12s %10s %10s %9s %9s\n", "node", "tier",
                               "tracked", "resident", "resident GB", "requests", "evictions",
                               "in flight", "proposed");
  for (const auto& p : r.pools()) {
    std::string tier = v1::Tier_Name(p.tier());
    if (tier.rfind("TIER_", 0) == 0) tier = tier.substr(5);
    std::cout << absl::StrFormat("%-20s %-6s %12d %12d %12.3f %10d %10d %9d %9d\n", p.node_id(),
                                 tier, p.blocks_tracked(), p.resident_blocks(),
                                 p.resident_bytes() / 1e9, p.requests(), p.evictions(),
                                 p.requests_in_flight(), p.proposed_blocks());
  }
  return 0;
}

int RunReload(const CtlFlags& f) {
  v1::ReloadModelRequest req;
  req.set_path(f.model);
  v1::ReloadModelResponse r;
  const grpc::Status s = Stub(f)->ReloadModel(Context(f).get(), req, &r);
  if (!s.ok()) return FailRpc(f, "ReloadModel", s);
  std::cout << "reloaded " << f.model << ": model " << r.model_version() << "\n";
  return 0;
}

}  // namespace

Command AddCtlCommand(CLI::App& root) {
  auto f = std::make_shared<CtlFlags>();
  CLI::App* cmd = root.add_subcommand(
      "ctl", "Ask a running sidecar (kvlearn serve): status, pools, reload MODEL.");
  cmd->require_subcommand(1);
  cmd->add_option("--target", f->target, "the sidecar's gRPC address HOST:PORT")
      ->capture_default_str();
  cmd->add_option("--token", f->token,
                  "bearer token of the sidecar's --auth-tokens file (an operator's for status, "
                  "pools and reload); default: $KVLEARN_TOKEN")
      ->envname("KVLEARN_TOKEN");
  cmd->add_option("--timeout-seconds", f->timeout_seconds,
                  "give up, naming the address, when the sidecar has not answered by then")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  auto mode = std::make_shared<std::string>();
  cmd->add_subcommand("status", "policy, model version, uptime, event log")->callback([mode] {
    *mode = "status";
  });
  cmd->add_subcommand("pools",
                      "one line per node and tier: blocks tracked and resident, "
                      "resident GB, requests, evictions, in flight, proposed victims")
      ->callback([mode] { *mode = "pools"; });
  CLI::App* reload = cmd->add_subcommand(
      "reload", "load, validate and swap in a model file (a path on the sidecar's machine)");
  reload->add_option("MODEL", f->model, "model file, as the sidecar sees it")->required();
  reload->callback([mode] { *mode = "reload"; });
  return {cmd, [f, mode] {
            if (*mode == "reload") return RunReload(*f);
            return RunStatusOrPools(*f, *mode == "pools");
          }};
}

}  // namespace kvlearn
