// `kvlearn loadgen` as a library: plays N serving nodes, each with its own
// pool of `pool_bytes`, replaying a trace against a running sidecar over real
// gRPC. Request i goes to node i mod N. A node first reports its pool
// capacity (pool_configured); then per request it:
//   1. reports the arrival (its whole chain, request id "r<index>") and a hit
//      event per block of its resident prefix, deepest first (one
//      ReportEvents call, which also finishes the node's previous request);
//   2. for each missing block, root to leaf: Admit; if kept and short of room,
//      RankEviction for the missing bytes and evicts the victims it is given;
//      then reports the removals (which confirm the proposal) and the block
//      stored (one ReportEvents call). A discarded block, or no room, ends
//      admission for the request.
// At the end each node reports its last request finished.
// This is the simulator's protocol (sim/pool_simulator.cc), so with one node
// the hit counts equal ReplayPool's for the server's policy.
//
// Each node runs its requests in trace order; `concurrency` threads share the
// nodes. Counters and TTFT are computed as ReplayPool computes them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "sim/comparison_report.h"
#include "sim/replay_result.h"
#include "sim/replay_trace.h"

namespace grpc {
class ChannelCredentials;
}

namespace kvlearn {

struct LoadgenOptions {
  std::string target;                                     // host:port of the sidecar
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr: plaintext
  uint32_t nodes = 1;
  uint32_t concurrency = 1;
  uint64_t pool_bytes = 0;  // per node
  double eval_from = 0;
  std::string node_prefix = "loadgen-";  // node ids are prefix + index
  // Sent as 'authorization: Bearer TOKEN' on every call; empty: none. A
  // reporter's token (bound to the node ids, or '*') runs the whole replay;
  // the policy's name then comes from the Admit answers, as GetStatus is an
  // operator's.
  std::string token;
  // When set, advanced by one per request served (a progress line reads it).
  std::atomic<uint64_t>* requests_done = nullptr;
  // `target` is one replica of a group (docs/scale_out.md): each node first
  // asks it which replica owns the node and then makes every call there
  // (ReportEvents included, which replicas do not route); a redirect or a
  // replica that stops answering sends the node back to `target` to find its
  // owner again, within `failover_seconds`, and the node re-reports its whole
  // pool (cleared, configured, every resident block, the request running) to
  // the owner it finds before going on.
  bool follow_owners = false;
  double failover_seconds = 30;
};

// A node whose calls moved from one replica to another (follow_owners).
struct NodeMove {
  std::string node;
  std::string from, to;         // replica addresses
  double failed_at_unix = 0;    // the first call that failed or was redirected
  double answered_at_unix = 0;  // the new owner took the node's re-reported pool
};

struct RpcLatency {
  std::string rpc;
  uint64_t calls = 0;
  double p50_us = 0;
  double p99_us = 0;
};

struct LoadgenResult {
  ReplayResult result;  // summed over nodes; policy = the server's
  std::vector<RpcLatency> rpcs;
  double wall_seconds = 0;
  std::vector<NodeMove> moves;  // in the order the nodes were answered again
};

absl::StatusOr<LoadgenResult> RunLoadgen(const ReplayTrace& replay, const CostModel& cost,
                                         const LoadgenOptions& options);

// `compare`'s table / JSON for the one result, plus the RPC latencies (JSON:
// an extra top-level "rpc": {"<Rpc>": {"calls", "rpc_p50_us", "rpc_p99_us"}}).
std::string FormatLoadgenTable(const Comparison& comparison, const LoadgenResult& result);
std::string FormatLoadgenJson(const Comparison& comparison, const LoadgenResult& result);

}  // namespace kvlearn
