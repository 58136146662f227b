#include "clients/load_generator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <map>
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

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One channel per replica address, shared by the nodes (follow_owners).
class Replicas {
 public:
  explicit Replicas(std::shared_ptr<grpc::ChannelCredentials> credentials)
      : credentials_(std::move(credentials)) {}

  v1::Retention::Stub& At(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& stub = stubs_[address];
    if (!stub) stub = v1::Retention::NewStub(grpc::CreateChannel(address, credentials_));
    return *stub;
  }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::Retention::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

// The owner a replica's redirect names, or "" when the call was not one.
std::string RedirectedTo(const grpc::ClientContext& ctx, const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return "";
  const auto& trailers = ctx.GetServerTrailingMetadata();
  // The key server/replica_ownership.h names (clients do not link the server).
  const auto it = trailers.find("kvlearn-owner");
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A call that a replica group answers by moving the node elsewhere: a
// redirect, or a replica that is gone or not ready.
bool NodeMustMove(const grpc::ClientContext& ctx, const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || !RedirectedTo(ctx, s).empty();
}

// One serving node: its own pool and the calls it makes.
class Node {
 public:
  Node(const ReplayTrace& replay, const LoadgenOptions& o, uint32_t index, Replicas& replicas)
      : replay_(replay),
        pool_(&replay.catalog, o.pool_bytes),
        id_(o.node_prefix + std::to_string(index)),
        token_(o.token),
        replicas_(replicas),
        entry_(o.target),
        follow_(o.follow_owners),
        failover_seconds_(o.failover_seconds),
        target_(o.follow_owners ? "" : o.target) {}

  absl::Status Serve(uint32_t ri, RequestOutcome& out,
                     std::vector<double> (&latency_us)[kRpcCount]) {
    if (target_.empty()) {
      if (auto s = FindOwner(); !s.ok()) return s;
    }
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
    v1::Event* arrival_event = NewEvent(batch, ts_us);
    auto* arrival = arrival_event->mutable_request_arrival();
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
    if (follow_) running_arrival_ = *arrival_event;
    pool_.BeginRequest();
    const uint32_t hits = pool_.ResidentPrefix({chain, r.num_blocks});
    for (uint32_t i = hits; i-- > 0;) {
      pool_.Pin(chain[i]);
      NewEvent(batch, ts_us)->mutable_block_hit()->set_block_id(catalog[chain[i]].hash_id);
      out.hit_tokens += trace.TokensOfBlock(r, i);
      out.loaded_bytes += catalog[chain[i]].bytes;
    }
    out.hit_blocks = hits;
    if (auto s = Report(batch, latency_us); !s.ok()) return s;

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
      if (auto s = Call(kAdmit, &v1::Retention::Stub::Admit, admit, &decision, latency_us);
          !s.ok()) {
        return s;
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
        if (auto s =
                Call(kRankEviction, &v1::Retention::Stub::RankEviction, rank, &victims, latency_us);
            !s.ok()) {
          return s;
        }
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
        AddStored(changes, ts_us, b);
      }
      if (changes.events_size() > 0) {
        if (auto s = Report(changes, latency_us); !s.ok()) return s;
      }
      if (!fits) break;  // everything left is pinned
    }
    return absl::OkStatus();
  }

  // Reports the last request served finished (once the node has no more).
  absl::Status Finish(std::vector<double> (&latency_us)[kRpcCount]) {
    v1::EventBatch batch;
    FinishPrevious(batch, last_ts_us_);
    if (batch.events().empty()) return absl::OkStatus();
    return Report(batch, latency_us);
  }

  // The policy named by the sidecar's first Admit answer ("" before one).
  const std::string& policy() const { return policy_; }
  const std::vector<NodeMove>& moves() const { return moves_; }

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

  void AddStored(v1::EventBatch& batch, int64_t ts_us, BlockIndex b) {
    const BlockCatalog& catalog = replay_.catalog;
    const BlockMeta& meta = catalog[b];
    auto* stored = NewEvent(batch, ts_us)->mutable_block_stored();
    stored->set_block_id(meta.hash_id);
    if (meta.parent != kNoBlock) stored->set_parent_id(catalog[meta.parent].hash_id);
    stored->set_tokens(meta.tokens);
    stored->set_bytes(static_cast<int64_t>(meta.bytes));
  }

  // A unary decision call at the node's replica; with follow_owners, a
  // redirect or a replica gone moves the node (Relocate) and the call is made
  // again at its new owner.
  template <typename Request, typename Response>
  absl::Status Call(LoadgenRpc rpc,
                    grpc::Status (v1::Retention::Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                    const Request& request, Response* response,
                    std::vector<double> (&latency_us)[kRpcCount]) {
    // More moves than this within one call means the group does not settle.
    constexpr int kMaxMoves = 8;
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      Authorize(ctx, token_);
      const auto start = std::chrono::steady_clock::now();
      const grpc::Status s = (replicas_.At(target_).*method)(&ctx, request, response);
      latency_us[rpc].push_back(Micros(start));
      if (s.ok() || !follow_ || attempt == kMaxMoves || !NodeMustMove(ctx, s)) {
        return FromGrpc(s, kRpcNames[rpc]);
      }
      if (auto moved = Relocate(); !moved.ok()) return moved;
    }
  }

  // One ReportEvents call of `batch` at `address`.
  grpc::Status SendReport(const std::string& address, const v1::EventBatch& batch,
                          v1::ReportSummary* summary) {
    grpc::ClientContext ctx;
    Authorize(ctx, token_);
    auto writer = replicas_.At(address).ReportEvents(&ctx, summary);
    writer->Write(batch);
    writer->WritesDone();
    return writer->Finish();
  }

  absl::Status Report(const v1::EventBatch& batch, std::vector<double> (&latency_us)[kRpcCount]) {
    v1::ReportSummary summary;
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status s = SendReport(target_, batch, &summary);
    latency_us[kReportEvents].push_back(Micros(start));
    // ReportEvents is not routed: only a replica gone says the node must move.
    // The re-report at the new owner carries what this batch did (the local
    // pool and the running request already include it).
    if (follow_ && (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      return Relocate();
    }
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

  // Asks the entry replica which replica owns this node (a redirect names
  // it; any other answer than UNAVAILABLE means the one asked serves it) and
  // makes it the node's target. The probe is a RankEviction of zero bytes,
  // which changes nothing. Retried every 50 ms, from the entry again, while
  // replicas are gone or not ready (a dead owner is still named until its
  // key expires), for at most failover_seconds.
  absl::Status FindOwner() {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(failover_seconds_));
    std::string at = entry_;
    int hops = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      v1::RankRequest probe;
      probe.set_node_id(id_);
      probe.set_tier(v1::TIER_POOL);
      probe.set_bytes_to_free(0);
      v1::RankResponse ignored;
      grpc::ClientContext ctx;
      Authorize(ctx, token_);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      const grpc::Status s = replicas_.At(at).RankEviction(&ctx, probe, &ignored);
      const std::string owner = RedirectedTo(ctx, s);
      if (!owner.empty() && owner != at && ++hops <= 3) {
        at = owner;
        continue;
      }
      if (!NodeMustMove(ctx, s)) {
        target_ = at;
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      at = entry_;
      hops = 0;
    }
    return absl::UnavailableError(absl::StrCat("no replica of the group at ", entry_,
                                               " served node ", id_, " within ", failover_seconds_,
                                               " s (--failover-seconds)"));
  }

  // The node's replica is gone or redirected it: finds the owner and
  // re-reports the node's whole state there (its pool cleared and
  // configured, every resident block parents first, the running request's
  // arrival), retrying while that owner fails too. Records the move.
  absl::Status Relocate() {
    NodeMove move{.node = id_, .from = target_, .failed_at_unix = UnixNow()};
    constexpr int kMaxOwners = 8;
    for (int owners = 0; owners < kMaxOwners; ++owners) {
      if (auto s = FindOwner(); !s.ok()) return s;
      grpc::Status sent = grpc::Status::OK;
      for (const v1::EventBatch& batch : StateBatches()) {
        v1::ReportSummary summary;
        sent = SendReport(target_, batch, &summary);
        if (!sent.ok()) break;
        if (summary.rejected() > 0) {
          return absl::InternalError(
              absl::StrCat("ReportEvents: replica ", target_, " refused ", summary.rejected(),
                           " events of node ", id_, "'s re-reported state",
                           summary.rejections_size() > 0
                               ? absl::StrCat(", first: ", summary.rejections(0).message())
                               : ""));
        }
      }
      if (sent.ok()) {
        move.to = target_;
        move.answered_at_unix = UnixNow();
        if (move.to != move.from) moves_.push_back(move);
        return absl::OkStatus();
      }
      if (sent.error_code() != grpc::StatusCode::UNAVAILABLE &&
          sent.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return FromGrpc(sent, "ReportEvents");
      }
    }
    return absl::UnavailableError(
        absl::StrCat("node ", id_, ": ", kMaxOwners, " owners in a row stopped answering"));
  }

  // The node's state as events, in batches the sidecar's default
  // --max-events-per-batch takes.
  std::vector<v1::EventBatch> StateBatches() {
    constexpr int kPerBatch = 1024;
    std::vector<v1::EventBatch> batches(1);
    const int64_t ts = last_ts_us_;
    NewEvent(batches[0], ts)->mutable_all_blocks_cleared();
    NewEvent(batches[0], ts)
        ->mutable_pool_configured()
        ->set_capacity_bytes(static_cast<int64_t>(pool_.capacity_bytes()));
    const BlockCatalog& catalog = replay_.catalog;
    std::vector<bool> sent(catalog.size(), false);
    std::vector<BlockIndex> path;
    for (BlockIndex b = 0; b < catalog.size(); ++b) {
      // Ancestors first: a stored block's parent must be known.
      path.clear();
      for (BlockIndex a = b; a != kNoBlock && pool_.IsResident(a) && !sent[a];
           a = catalog[a].parent) {
        path.push_back(a);
      }
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        if (batches.back().events_size() >= kPerBatch) batches.emplace_back();
        AddStored(batches.back(), ts, *it);
        sent[*it] = true;
      }
    }
    if (!running_.empty()) *batches.back().add_events() = running_arrival_;
    return batches;
  }

  const ReplayTrace& replay_;
  PoolState pool_;
  const std::string id_;
  const std::string token_;
  Replicas& replicas_;
  const std::string entry_;  // the address given as --target
  const bool follow_;
  const double failover_seconds_;
  std::string target_;  // where this node's calls go ("" until its owner is found)
  std::string policy_;
  bool configured_ = false;
  std::string running_;          // request id of the request served last, until finished
  v1::Event running_arrival_;    // follow_owners: its arrival, for a re-report
  std::vector<NodeMove> moves_;  // follow_owners
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
  if (!(o.failover_seconds > 0))
    return absl::InvalidArgumentError("--failover-seconds must be > 0");
  Replicas replicas(o.credentials ? o.credentials : grpc::InsecureChannelCredentials());
  v1::Retention::Stub* stub = &replicas.At(o.target);

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
  for (uint32_t i = 0; i < o.nodes; ++i) {
    nodes.push_back(std::make_unique<Node>(replay, o, i, replicas));
  }
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
        status = nodes[node]->Serve(ri, outcomes[ri], mine);
        if (o.requests_done) o.requests_done->fetch_add(1, std::memory_order_relaxed);
      }
      for (uint32_t node = t; node < o.nodes && status.ok(); node += threads) {
        status = nodes[node]->Finish(mine);
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
    result.moves.insert(result.moves.end(), node->moves().begin(), node->moves().end());
  }
  std::sort(result.moves.begin(), result.moves.end(), [](const NodeMove& a, const NodeMove& b) {
    return a.answered_at_unix < b.answered_at_unix;
  });
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
