#include "clients/load_generator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/pool_state.h"
#include "kvlearn/v1/retention.grpc.pb.h"
#include "sim/replay_accounting.h"

namespace kvlearn {
namespace {

enum LoadgenRpc { kReportEvents, kAdmit, kRankEviction, kRpcCount };
constexpr const char* kRpcNames[kRpcCount] = {"ReportEvents", "Admit", "RankEviction"};

// Adds the bearer token, if any (docs/sidecar.md, Authentication).
void Authorize(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& rpc) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(rpc, ": ", s.error_message()));
}

// One serving node: its own pool and the calls it makes.
class Node {
 public:
  Node(const ReplayTrace& replay, const LoadgenOptions& o, uint32_t index)
      : replay_(replay),
        pool_(&replay.catalog, o.pool_bytes),
        id_(o.node_prefix + std::to_string(index)),
        token_(o.token) {}

  absl::Status Serve(v1::Retention::Stub& stub, uint32_t ri, RequestOutcome& out,
                     std::vector<double> (&latency_us)[kRpcCount]) {
    const Trace& trace = *replay_.trace;
    const TraceRequest& r = trace.requests[ri];
    const BlockIndex* chain = replay_.blocks.data() + r.first_block;
    const BlockCatalog& catalog = replay_.catalog;
    const int64_t ts_us = r.timestamp_ms * 1000;
    last_ts_us_ = ts_us;

    v1::EventBatch batch;
    FinishPrevious(batch, ts_us);
    if (!configured_) {
      // A node starts with an empty pool: whatever the sidecar remembers of
      // an earlier run under this node's name is gone.
      NewEvent(batch, ts_us)->mutable_all_blocks_cleared();
      NewEvent(batch, ts_us)
          ->mutable_pool_configured()
          ->set_capacity_bytes(static_cast<int64_t>(pool_.capacity_bytes()));
      configured_ = true;
    }
    auto* arrival = NewEvent(batch, ts_us)->mutable_request_arrival();
    running_ = absl::StrCat("r", ri);
    arrival->set_request_id(running_);
    arrival->set_input_length(r.input_length);
    arrival->set_output_length(r.output_length);
    static_assert(static_cast<int>(RequestType::kFile) == v1::REQUEST_TYPE_FILE &&
                  static_cast<int>(RequestType::kOther) == v1::REQUEST_TYPE_OTHER);
    arrival->set_request_type(static_cast<v1::RequestType>(r.type));  // numbered alike
    arrival->set_turn(r.turn);
    for (uint32_t i = 0; i < r.num_blocks; ++i) {
      arrival->add_block_ids(catalog[chain[i]].hash_id);
      arrival->add_block_tokens(catalog[chain[i]].tokens);
      arrival->add_block_bytes(static_cast<int64_t>(catalog[chain[i]].bytes));
    }
    pool_.BeginRequest();
    const uint32_t hits = pool_.ResidentPrefix({chain, r.num_blocks});
    for (uint32_t i = hits; i-- > 0;) {
      pool_.Pin(chain[i]);
      NewEvent(batch, ts_us)->mutable_block_hit()->set_block_id(catalog[chain[i]].hash_id);
      out.hit_tokens += trace.TokensOfBlock(r, i);
      out.loaded_bytes += catalog[chain[i]].bytes;
    }
    out.hit_blocks = hits;
    if (auto s = Report(stub, batch, latency_us); !s.ok()) return s;

    for (uint32_t i = hits; i < r.num_blocks; ++i) {
      const BlockIndex b = chain[i];
      const BlockMeta& meta = catalog[b];
      if (meta.bytes > pool_.capacity_bytes()) break;
      v1::AdmitRequest admit;
      admit.set_node_id(id_);
      admit.set_tier(v1::TIER_POOL);
      admit.set_timestamp_us(ts_us);
      auto* c = admit.add_candidates();
      c->set_block_id(meta.hash_id);
      if (meta.parent != kNoBlock) c->set_parent_id(catalog[meta.parent].hash_id);
      c->set_tokens(meta.tokens);
      c->set_bytes(static_cast<int64_t>(meta.bytes));
      v1::AdmitResponse decision;
      {
        grpc::ClientContext ctx;
        Authorize(ctx, token_);
        const auto start = std::chrono::steady_clock::now();
        const grpc::Status s = stub.Admit(&ctx, admit, &decision);
        latency_us[kAdmit].push_back(Micros(start));
        if (!s.ok()) return FromGrpc(s, "Admit");
      }
      if (policy_.empty()) policy_ = decision.policy();
      if (decision.decisions_size() != 1 || !decision.decisions(0).keep()) break;

      v1::EventBatch changes;
      if (pool_.free_bytes() < meta.bytes) {
        v1::RankRequest rank;
        rank.set_node_id(id_);
        rank.set_tier(v1::TIER_POOL);
        rank.set_bytes_to_free(static_cast<int64_t>(meta.bytes - pool_.free_bytes()));
        v1::RankResponse victims;
        grpc::ClientContext ctx;
        Authorize(ctx, token_);
        const auto start = std::chrono::steady_clock::now();
        const grpc::Status s = stub.RankEviction(&ctx, rank, &victims);
        latency_us[kRankEviction].push_back(Micros(start));
        if (!s.ok()) return FromGrpc(s, "RankEviction");
        for (const auto& v : victims.victims()) {
          const BlockIndex vb = catalog.Find(v.block_id());
          if (vb == kNoBlock || !pool_.IsEvictable(vb)) {
            return absl::InternalError(absl::StrCat("RankEviction: the sidecar chose block ",
                                                    v.block_id(), " which node ", id_,
                                                    " cannot evict (not an unpinned leaf)"));
          }
          pool_.Evict(vb);
          ++out.evicted_blocks;
          NewEvent(changes, ts_us)->mutable_block_removed()->set_block_id(v.block_id());
        }
      }
      const bool fits = pool_.free_bytes() >= meta.bytes;
      if (fits) {
        pool_.Insert(b);
        pool_.Pin(b);
        out.admitted_bytes += meta.bytes;
        auto* stored = NewEvent(changes, ts_us)->mutable_block_stored();
        stored->set_block_id(meta.hash_id);
        if (meta.parent != kNoBlock) stored->set_parent_id(catalog[meta.parent].hash_id);
        stored->set_tokens(meta.tokens);
        stored->set_bytes(static_cast<int64_t>(meta.bytes));
      }
      if (changes.events_size() > 0) {
        if (auto s = Report(stub, changes, latency_us); !s.ok()) return s;
      }
      if (!fits) break;  // everything left is pinned
    }
    return absl::OkStatus();
  }

  // Reports the last request served finished (once the node has no more).
  absl::Status Finish(v1::Retention::Stub& stub, std::vector<double> (&latency_us)[kRpcCount]) {
    v1::EventBatch batch;
    FinishPrevious(batch, last_ts_us_);
    if (batch.events().empty()) return absl::OkStatus();
    return Report(stub, batch, latency_us);
  }

  // The policy named by the sidecar's first Admit answer ("" before one).
  const std::string& policy() const { return policy_; }

 private:
  static double Micros(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
        .count();
  }

  v1::Event* NewEvent(v1::EventBatch& batch, int64_t ts_us) {
    v1::Event* e = batch.add_events();
    e->set_node_id(id_);
    e->set_tier(v1::TIER_POOL);
    e->set_timestamp_us(ts_us);
    return e;
  }

  absl::Status Report(v1::Retention::Stub& stub, const v1::EventBatch& batch,
                      std::vector<double> (&latency_us)[kRpcCount]) {
    grpc::ClientContext ctx;
    Authorize(ctx, token_);
    v1::ReportSummary summary;
    const auto start = std::chrono::steady_clock::now();
    auto writer = stub.ReportEvents(&ctx, &summary);
    writer->Write(batch);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    latency_us[kReportEvents].push_back(Micros(start));
    if (!s.ok()) return FromGrpc(s, "ReportEvents");
    if (summary.rejected() > 0) {
      return absl::InternalError(absl::StrCat(
          "ReportEvents: the sidecar refused ", summary.rejected(), " events of node ", id_,
          summary.rejections_size() > 0 ? absl::StrCat(", first: ", summary.rejections(0).message())
                                        : ""));
    }
    return absl::OkStatus();
  }

  // Reports the end of the request served last, if any. It rides on the
  // next request's first batch (nothing happens on the node in between), or
  // on its own batch at the end of the run (Finish).
  void FinishPrevious(v1::EventBatch& batch, int64_t ts_us) {
    if (running_.empty()) return;
    NewEvent(batch, ts_us)->mutable_request_finished()->set_request_id(running_);
    running_.clear();
  }

  const ReplayTrace& replay_;
  PoolState pool_;
  const std::string id_;
  const std::string token_;
  std::string policy_;
  bool configured_ = false;
  std::string running_;  // request id of the request served last, until finished
  int64_t last_ts_us_ = 0;
};

}  // namespace

absl::StatusOr<LoadgenResult> RunLoadgen(const ReplayTrace& replay, const CostModel& cost,
                                         const LoadgenOptions& o) {
  if (o.nodes == 0) return absl::InvalidArgumentError("--nodes must be >= 1");
  if (o.concurrency == 0) return absl::InvalidArgumentError("--concurrency must be >= 1");
  if (!(o.eval_from >= 0 && o.eval_from < 1)) {
    return absl::InvalidArgumentError("--eval-from must be in [0, 1)");
  }
  const uint32_t prefill_nodes = cost.hardware().prefill_nodes;
  if (prefill_nodes == 0) return absl::InvalidArgumentError("prefill_nodes must be at least 1");
  auto creds = o.credentials ? o.credentials : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateChannel(o.target, creds);
  auto stub = v1::Retention::NewStub(channel);

  LoadgenResult result;
  {
    // Waits for a server started just before (its start-up takes well under a
    // second), but not the 10 s a dead address used to cost.
    constexpr int kConnectSeconds = 3;
    v1::GetStatusResponse status;
    grpc::ClientContext ctx;
    Authorize(ctx, o.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kConnectSeconds));
    ctx.set_wait_for_ready(true);
    // A reporter's token may not read the status: the policy's name then
    // comes from the Admit answers.
    const grpc::Status s = stub->GetStatus(&ctx, {}, &status);
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach ", o.target, " (no answer to GetStatus in ", kConnectSeconds,
                       " s): is `kvlearn serve` running there? Start it or fix --target"));
    }
    if (s.error_code() != grpc::StatusCode::PERMISSION_DENIED) {
      if (auto st = FromGrpc(s, "GetStatus"); !st.ok()) return st;
    }
    result.result.policy = status.policy();
  }

  const Trace& trace = *replay.trace;
  const auto n = static_cast<uint32_t>(trace.requests.size());
  std::vector<RequestOutcome> outcomes(n);
  std::vector<std::unique_ptr<Node>> nodes;
  for (uint32_t i = 0; i < o.nodes; ++i) nodes.push_back(std::make_unique<Node>(replay, o, i));
  const uint32_t threads = std::min(o.concurrency, o.nodes);
  std::vector<std::vector<double>> latency(kRpcCount);
  absl::Mutex mu;
  absl::Status first_error;

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<double> mine[kRpcCount];
      absl::Status status;
      for (uint32_t ri = 0; ri < n && status.ok(); ++ri) {
        const uint32_t node = ri % o.nodes;
        if (node % threads != t) continue;
        status = nodes[node]->Serve(*stub, ri, outcomes[ri], mine);
        if (o.requests_done) o.requests_done->fetch_add(1, std::memory_order_relaxed);
      }
      for (uint32_t node = t; node < o.nodes && status.ok(); node += threads) {
        status = nodes[node]->Finish(*stub, mine);
      }
      absl::MutexLock lock(&mu);
      if (!status.ok() && first_error.ok()) first_error = status;
      for (int k = 0; k < kRpcCount; ++k) {
        latency[k].insert(latency[k].end(), mine[k].begin(), mine[k].end());
      }
    });
  }
  for (auto& w : workers) w.join();
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!first_error.ok()) return first_error;

  // Aggregate through the simulator's own accounting (equal results by construction).
  ReplayAccounting accounting(cost, prefill_nodes, static_cast<uint32_t>(o.eval_from * n));
  for (uint32_t ri = 0; ri < n; ++ri) accounting.Record(ri, trace.requests[ri], outcomes[ri]);
  ReplayResult& res = result.result;
  std::string policy = res.policy;
  for (const auto& node : nodes) {
    if (policy.empty()) policy = node->policy();
  }
  res = accounting.Finish();
  res.policy = policy;
  res.replay_seconds = result.wall_seconds;
  res.replayed_accesses = replay.block_accesses();

  for (int k = 0; k < kRpcCount; ++k) {
    RpcLatency l;
    l.rpc = kRpcNames[k];
    l.calls = latency[k].size();
    const LatencySummary s = Summarize(latency[k]);
    l.p50_us = s.p50;
    l.p99_us = s.p99;
    result.rpcs.push_back(l);
  }
  return result;
}

std::string FormatLoadgenTable(const Comparison& comparison, const LoadgenResult& result) {
  std::string out = FormatTable(comparison);
  absl::StrAppend(&out,
                  absl::StrFormat("\n%-14s %10s %12s %12s\n", "rpc", "calls", "p50 us", "p99 us"));
  for (const RpcLatency& l : result.rpcs) {
    absl::StrAppend(
        &out, absl::StrFormat("%-14s %10d %12.1f %12.1f\n", l.rpc, l.calls, l.p50_us, l.p99_us));
  }
  absl::StrAppend(&out, absl::StrFormat("wall %.2f s\n", result.wall_seconds));
  return out;
}

std::string FormatLoadgenJson(const Comparison& comparison, const LoadgenResult& result) {
  std::string out = FormatJson(comparison);
  // FormatJson ends with "]}\n": reopen the top-level object after "]".
  if (out.size() >= 2 && out.compare(out.size() - 2, 2, "}\n") == 0) out.resize(out.size() - 2);
  absl::StrAppend(&out, ", \"rpc\": {");
  for (size_t i = 0; i < result.rpcs.size(); ++i) {
    const RpcLatency& l = result.rpcs[i];
    absl::StrAppend(&out, i ? ", " : "", "\"", l.rpc, "\": {\"calls\": ", l.calls,
                    ", \"rpc_p50_us\": ", absl::StrFormat("%.17g", l.p50_us),
                    ", \"rpc_p99_us\": ", absl::StrFormat("%.17g", l.p99_us), "}");
  }
  absl::StrAppend(&out, "}}\n");
  return out;
}

}  // namespace kvlearn
