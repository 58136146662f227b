// `kvlearn ctl`: asks a running sidecar over its gRPC API, without writing a
// client: status (policy, model, log), pools (one line per node and tier),
// reload MODEL (ReloadModel), reload-experiment (ReloadModel with
// experiment set: the server's --experiment file read again), and metrics (its Prometheus /metrics
// text, found through GetStatus's metrics_port on the --target host, or at
// --metrics-address). A sidecar that does not answer within --timeout-seconds
// gets one line naming the address and exit status 1.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/command.h"
#include "cli/sidecar_call_context.h"
#include "kvlearn/v1/retention.grpc.pb.h"

namespace kvlearn {
namespace {

struct CtlFlags {
  std::string target = "127.0.0.1:50051";
  std::string token;
  double timeout_seconds = 3;
  std::string model;                  // reload
  std::string metrics_address;        // metrics: HOST:PORT, else discovered
  std::vector<std::string> prefixes;  // metrics: only series named so
};

int Fail(const std::string& what) {
  std::cerr << "kvlearn ctl: " << what << "\n";
  return 1;
}

std::unique_ptr<grpc::ClientContext> Context(const CtlFlags& f) {
  return SidecarCallContext(f.timeout_seconds, f.token);
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

// "HOST:PORT" into its parts; brackets dropped from an IPv6 host.
bool SplitAddress(const std::string& address, std::string& host, int& port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port > 0 && port < 65536;
}

// A line of the exposition text belongs to the series named by a prefix:
// samples by their name, "# HELP NAME" / "# TYPE NAME" by the name they give.
bool Wanted(absl::string_view line, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  const bool described =
      absl::ConsumePrefix(&line, "# HELP ") || absl::ConsumePrefix(&line, "# TYPE ");
  if (!described && absl::StartsWith(line, "#")) return false;
  for (const std::string& p : prefixes) {
    if (absl::StartsWith(line, p)) return true;
  }
  return false;
}

int RunMetrics(const CtlFlags& f) {
  std::string host;
  int port = 0;
  if (!f.metrics_address.empty()) {
    if (!SplitAddress(f.metrics_address, host, port)) {
      return Fail(absl::StrCat("--metrics-address ", f.metrics_address, ": expected HOST:PORT"));
    }
  } else {
    // Discovered: the sidecar says its /metrics port; the host is --target's
    // (a sidecar listening for /metrics elsewhere needs --metrics-address).
    v1::GetStatusResponse r;
    const grpc::Status s = Stub(f)->GetStatus(Context(f).get(), {}, &r);
    if (!s.ok()) return FailRpc(f, "GetStatus", s);
    if (r.metrics_port() == 0) {
      return Fail(absl::StrCat("the sidecar at ", f.target,
                               " serves no /metrics (started with --metrics-listen '', or older "
                               "than GetStatus's metrics_port): give --metrics-address HOST:PORT "
                               "if it serves them elsewhere"));
    }
    if (!SplitAddress(f.target, host, port)) {
      return Fail(absl::StrCat("--target ", f.target, ": expected HOST:PORT"));
    }
    port = static_cast<int>(r.metrics_port());
  }
  const std::string url = absl::StrCat("http://", host, ":", port, "/metrics");
  httplib::Client http(host, port);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_seconds * 1000));
  http.set_connection_timeout(timeout);
  http.set_read_timeout(timeout);
  const httplib::Result res = http.Get("/metrics");
  if (!res || res->status != 200) {
    return Fail(absl::StrCat(
        "cannot read ", url, ": ",
        res ? absl::StrCat("HTTP ", res->status) : httplib::to_string(res.error()),
        f.metrics_address.empty()
            ? "; if /metrics listens on another host than --target's, give --metrics-address"
            : ""));
  }
  for (absl::string_view line : absl::StrSplit(res->body, '\n', absl::SkipEmpty())) {
    if (Wanted(line, f.prefixes)) std::cout << line << "\n";
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

int RunReloadExperiment(const CtlFlags& f) {
  v1::ReloadModelRequest req;
  req.set_experiment(true);
  v1::ReloadModelResponse r;
  const grpc::Status s = Stub(f)->ReloadModel(Context(f).get(), req, &r);
  if (!s.ok()) return FailRpc(f, "ReloadModel", s);
  std::cout << "reloaded the experiment: arms " << r.experiment_arms() << "\n";
  return 0;
}

}  // namespace

Command AddCtlCommand(CLI::App& root) {
  auto f = std::make_shared<CtlFlags>();
  CLI::App* cmd = root.add_subcommand(
      "ctl",
      "Ask a running sidecar (kvlearn serve): status, pools, reload MODEL, reload-experiment, "
      "metrics.");
  cmd->require_subcommand(1);
  cmd->add_option("--target", f->target, "the sidecar's gRPC address HOST:PORT")
      ->capture_default_str();
  cmd->add_option("--token", f->token,
                  "bearer token of the sidecar's --auth-tokens file (an operator's for status, "
                  "pools, reload and metrics' GetStatus; /metrics itself takes none); default: "
                  "$KVLEARN_TOKEN")
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
  cmd->add_subcommand("reload-experiment",
                      "read the sidecar's --experiment file again and run it "
                      "(docs/experiments.md); prints its arms as name=policy[:model version]")
      ->callback([mode] { *mode = "reload-experiment"; });
  CLI::App* metrics = cmd->add_subcommand(
      "metrics",
      "print the sidecar's Prometheus /metrics text (docs/sidecar.md, 'Metrics and status'), "
      "read from the port GetStatus reports on the --target host");
  metrics->add_option("PREFIX", f->prefixes,
                      "only the series whose names start with one of these (with their HELP and "
                      "TYPE lines), e.g. kvlearn_rpcs_total");
  metrics->add_option("--metrics-address", f->metrics_address,
                      "read /metrics at HOST:PORT instead (the sidecar's --metrics-listen, when "
                      "its host is not --target's); GetStatus is then not called");
  metrics->callback([mode] { *mode = "metrics"; });
  return {cmd, [f, mode] {
            if (*mode == "reload") return RunReload(*f);
            if (*mode == "reload-experiment") return RunReloadExperiment(*f);
            if (*mode == "metrics") return RunMetrics(*f);
            return RunStatusOrPools(*f, *mode == "pools");
          }};
}

}  // namespace kvlearn
