// `kvlearn loadgen`: plays N serving nodes against a running sidecar over
// gRPC, replaying a trace (clients/load_generator.h), and prints compare's
// result schema plus per-RPC latency percentiles.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command.h"
#include "cli/cost_flags.h"
#include "cli/flag_checks.h"
#include "cli/prefill_sizing.h"
#include "cli/replay_input.h"
#include "cli/trace_input_flags.h"
#include "clients/load_generator.h"
#include "core/cost_model.h"
#include "core/progress_line.h"
#include "sim/comparison_report.h"
#include "sim/replay_trace.h"

namespace kvlearn {
namespace {

struct LoadgenFlags {
  std::string target = "127.0.0.1:50051";
  TraceInputFlags input;
  uint32_t nodes = 1;
  uint32_t concurrency = 1;
  double pool_fraction = 0.1;
  uint64_t pool_bytes = 0;
  double eval_from = 0;
  std::string format = "table";
  bool quiet = false;
  CostFlags cost;
  std::string tls_ca, tls_cert, tls_key;
  std::string token;
  bool follow_owners = false;
  double failover_seconds = 30;
};

int Fail(const absl::Status& s) {
  std::cerr << "kvlearn loadgen: " << s.message() << "\n";
  return 1;
}

absl::StatusOr<std::string> Slurp(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int RunLoadgenCommand(const LoadgenFlags& f) {
  auto resolved = f.cost.Resolve();
  if (!resolved.ok()) return Fail(resolved.status());
  const CostModel& cost = *resolved;

  auto read_options = f.input.Resolve();
  if (!read_options.ok()) return Fail(read_options.status());
  Trace trace;
  auto replay = ReadTraceForReplay(f.input.trace, *read_options, cost, "loadgen", std::cerr, trace);
  if (!replay.ok()) return Fail(replay.status());

  LoadgenOptions o;
  o.target = f.target;
  o.nodes = f.nodes;
  o.concurrency = f.concurrency;
  o.eval_from = f.eval_from;
  o.token = f.token;
  o.follow_owners = f.follow_owners;
  o.failover_seconds = f.failover_seconds;
  o.pool_bytes = f.pool_bytes
                     ? f.pool_bytes
                     : static_cast<uint64_t>(f.pool_fraction * replay->distinct_block_bytes);
  if (!f.tls_ca.empty() || !f.tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!f.tls_ca.empty()) {
      auto ca = Slurp(f.tls_ca, "--tls-ca");
      if (!ca.ok()) return Fail(ca.status());
      ssl.pem_root_certs = *ca;
    }
    if (!f.tls_cert.empty()) {
      auto cert = Slurp(f.tls_cert, "--tls-cert");
      if (!cert.ok()) return Fail(cert.status());
      auto key = Slurp(f.tls_key, "--tls-key");
      if (!key.ok()) return Fail(key.status());
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    o.credentials = grpc::SslCredentials(ssl);
  }
  std::cerr << absl::StrFormat(
      "loadgen: %d requests (%d block accesses) over %d node(s), %d thread(s), pool %d bytes "
      "per node, target %s\n",
      trace.requests.size(), replay->block_accesses(), o.nodes, o.concurrency, o.pool_bytes,
      o.target);
  // The prefill instances compare would size for this trace and pool, so the
  // header, the JSON and the TTFT accounting all use the count that runs.
  PoolReplayOptions sizing;
  sizing.pool_bytes = o.pool_bytes;
  sizing.eval_from = o.eval_from;
  const bool auto_nodes = f.cost.prefill_nodes == "auto";
  auto sized = SizePrefillNodes(*replay, cost, sizing, auto_nodes, std::cerr);
  if (!sized.ok()) return Fail(sized.status());
  ProgressLine progress("kvlearn loadgen: served", trace.requests.size(), "requests",
                        ProgressLine::Wanted(STDERR_FILENO, f.quiet), std::cerr);
  o.requests_done = &progress.counter();
  progress.Start();
  auto result = RunLoadgen(*replay, *sized, o);
  progress.Finish();
  if (!result.ok()) return Fail(result.status());
  for (const NodeMove& m : result->moves) {
    std::cerr << absl::StrFormat(
        "loadgen: node %s moved from %s to %s: first failed call at %.3f, answered again at "
        "%.3f (unix seconds)\n",
        m.node, m.from, m.to, m.failed_at_unix, m.answered_at_unix);
  }

  Comparison c;
  c.trace = f.input.trace;
  c.cost_model = std::string(RecomputeFormName(sized->form()));
  c.prefill_nodes = sized->hardware().prefill_nodes;
  c.prefill_nodes_auto = auto_nodes;
  c.requests = result->result.requests;
  c.block_accesses = result->result.block_accesses;
  c.pool_bytes = o.pool_bytes;
  c.results.push_back(result->result);
  std::cout << (f.format == "json" ? FormatLoadgenJson(c, *result)
                                   : FormatLoadgenTable(c, *result));
  return 0;
}

}  // namespace

Command AddLoadgenCommand(CLI::App& root) {
  auto f = std::make_shared<LoadgenFlags>();
  CLI::App* cmd = root.add_subcommand(
      "loadgen",
      "Play N serving nodes (each with its own pool) replaying a trace against a running "
      "sidecar over gRPC; print compare's columns plus RPC latency percentiles.");
  cmd->add_option("--target", f->target, "sidecar address HOST:PORT")->capture_default_str();
  f->input.Register(cmd, "trace to replay (Mooncake or Bailian JSONL)")->required();
  cmd->add_option("--nodes", f->nodes, "serving nodes (request i goes to node i mod N)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 16));
  cmd->add_option("--concurrency", f->concurrency, "client threads sharing the nodes")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  auto* fraction = cmd->add_option("--pool-fraction", f->pool_fraction,
                                   "pool capacity per node as a share of the trace's "
                                   "distinct-block bytes")
                       ->capture_default_str()
                       ->check(FiniteRange(0, 1e6));
  cmd->add_option("--pool-bytes", f->pool_bytes, "pool capacity per node in bytes")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX))
      ->excludes(fraction);
  cmd->add_option("--eval-from", f->eval_from, "share of requests used only to warm the pools")
      ->capture_default_str()
      ->check(FiniteRange(0, 0.999999));
  cmd->add_option("--format", f->format, "output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_flag("--quiet", f->quiet,
                "no progress line (drawn on stderr only when it is a terminal: requests served, "
                "rate, ETA)");
  f->cost.Register(cmd);  // the same cost model as compare (block bytes, TTFT)
  cmd->add_option("--tls-ca", f->tls_ca, "CA (PEM) to verify the server with: use TLS");
  cmd->add_option("--tls-cert", f->tls_cert, "client certificate (PEM), for mutual TLS");
  cmd->add_option("--tls-key", f->tls_key, "client private key (PEM), for mutual TLS");
  cmd->add_option("--token", f->token,
                  "bearer token of the sidecar's --auth-tokens file (a reporter bound to the "
                  "node ids loadgen-0.. or '*'); default: $KVLEARN_TOKEN")
      ->envname("KVLEARN_TOKEN");
  cmd->add_flag("--follow-owners", f->follow_owners,
                "--target is one replica of a group (serve --replica-group): make each node's "
                "calls at the replica owning it, and when that replica redirects or stops "
                "answering, find the new owner through --target and re-report the node's pool "
                "there; each move is printed on stderr (node, old and new replica, the unix "
                "time of the first failed call and of the new owner's first answer)");
  cmd->add_option("--failover-seconds", f->failover_seconds,
                  "--follow-owners: how long a node may look for an owner before loadgen fails")
      ->capture_default_str()
      ->check(FiniteRange(0.001, 3600));
  return {cmd, [f] { return RunLoadgenCommand(*f); }};
}

}  // namespace kvlearn
