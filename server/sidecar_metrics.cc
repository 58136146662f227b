#include "server/sidecar_metrics.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/traffic_drift.h"

namespace kvlearn {
namespace {

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// Prometheus label values escape backslash, quote and newline.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Header(std::string& out, const char* name, const char* type, const char* help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kReportEvents:
      return "ReportEvents";
    case Rpc::kAdmit:
      return "Admit";
    case Rpc::kRankEviction:
      return "RankEviction";
    case Rpc::kGetStatus:
      return "GetStatus";
    case Rpc::kReloadModel:
      return "ReloadModel";
    case Rpc::kDecide:
      return "Decide";
    default:
      return "unknown";
  }
}

const char* EventKindName(int kind) {
  static constexpr const char* kNames[kEventKinds] = {
      "request_arrival", "block_stored",      "block_removed",
      "block_hit",       "transfer_finished", "all_blocks_cleared",
      "pool_configured", "request_finished",  "batch_received"};
  return kind >= 0 && kind < kEventKinds ? kNames[kind] : "unknown";
}

SidecarMetrics::SidecarMetrics(uint32_t block_size_tokens) : traffic_(block_size_tokens) {
  start_time_seconds_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void SidecarMetrics::ObserveDecision(Rpc rpc, double seconds) {
  Histogram& h = latency_[Index(rpc)];
  size_t i = 0;
  while (i < kLatencyBounds.size() && seconds > kLatencyBounds[i]) ++i;
  h.buckets[i].fetch_add(1, kRelaxed);
  h.count.fetch_add(1, kRelaxed);
  h.sum_ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), kRelaxed);
}

void SidecarMetrics::SetModelInfo(const std::string& policy, const std::string& model_version) {
  absl::MutexLock lock(&mu_);
  policy_ = policy;
  model_version_ = model_version;
}

void SidecarMetrics::SetModelMetadata(const ModelMetadata* metadata) {
  absl::MutexLock lock(&mu_);
  if (metadata == nullptr) {
    model_.reset();
    return;
  }
  model_ = ServingModel{metadata->judgement.has_value(),
                        metadata->judgement.has_value() && metadata->judgement->fit(),
                        metadata->training_traffic};
}

void SidecarMetrics::ObserveArrival(int64_t timestamp_us, std::span<const uint64_t> block_ids) {
  absl::MutexLock lock(&traffic_mu_);
  traffic_.Add(static_cast<double>(timestamp_us) / 1e6, block_ids);
}

uint64_t SidecarMetrics::ingested_total() const {
  uint64_t n = 0;
  for (const auto& c : ingested_) n += c.load(kRelaxed);
  return n;
}

std::string SidecarMetrics::Render(const MetricsGauges& g) const {
  std::string out;
  Header(out, "kvlearn_rpcs_total", "counter", "RPCs finished, by method and gRPC status code.");
  for (int r = 0; r < kRpcs; ++r) {
    for (int c = 0; c < kCodes; ++c) {
      const uint64_t v = rpcs_[r][c].load(kRelaxed);
      if (v == 0 && c != 0) continue;
      absl::StrAppend(&out, "kvlearn_rpcs_total{rpc=\"", RpcName(static_cast<Rpc>(r)), "\",code=\"",
                      kCodeNames[c], "\"} ", v, "\n");
    }
  }
  Header(out, "kvlearn_decisions_total", "counter",
         "Per-block decisions: Admit keep/discard, RankEviction evict.");
  absl::StrAppend(&out, "kvlearn_decisions_total{rpc=\"Admit\",decision=\"keep\"} ",
                  admit_keep_.load(kRelaxed), "\n",
                  "kvlearn_decisions_total{rpc=\"Admit\",decision=\"discard\"} ",
                  admit_discard_.load(kRelaxed), "\n",
                  "kvlearn_decisions_total{rpc=\"RankEviction\",decision=\"evict\"} ",
                  evict_.load(kRelaxed), "\n");
  Header(out, "kvlearn_decision_latency_seconds", "histogram",
         "Time the server spends deciding one Admit or RankEviction call (excluding transport).");
  for (Rpc rpc : {Rpc::kAdmit, Rpc::kRankEviction}) {
    const Histogram& h = latency_[Index(rpc)];
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= kLatencyBounds.size(); ++i) {
      cumulative += h.buckets[i].load(kRelaxed);
      const std::string le =
          i < kLatencyBounds.size() ? absl::StrFormat("%g", kLatencyBounds[i]) : "+Inf";
      absl::StrAppend(&out, "kvlearn_decision_latency_seconds_bucket{rpc=\"", RpcName(rpc),
                      "\",le=\"", le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "kvlearn_decision_latency_seconds_sum{rpc=\"", RpcName(rpc), "\"} ",
                    absl::StrFormat("%.9f", h.sum_ns.load(kRelaxed) / 1e9), "\n",
                    "kvlearn_decision_latency_seconds_count{rpc=\"", RpcName(rpc), "\"} ",
                    h.count.load(kRelaxed), "\n");
  }
  Header(out, "kvlearn_events_ingested_total", "counter",
         "Events accepted and appended to the event log, by kind.");
  for (int k = 0; k < kEventKinds; ++k) {
    absl::StrAppend(&out, "kvlearn_events_ingested_total{kind=\"", EventKindName(k), "\"} ",
                    ingested_[k].load(kRelaxed), "\n");
  }
  Header(out, "kvlearn_events_rejected_total", "counter",
         "Events refused (not logged), by the gRPC status code of the reason.");
  for (int c = 1; c < kCodes; ++c) {
    const uint64_t v = rejected_[c].load(kRelaxed);
    if (v == 0 && c != 3) continue;
    absl::StrAppend(&out, "kvlearn_events_rejected_total{code=\"", kCodeNames[c], "\"} ", v, "\n");
  }
  Header(out, "kvlearn_pools", "gauge", "(node, tier) pools the sidecar tracks.");
  absl::StrAppend(&out, "kvlearn_pools ", g.pools, "\n");
  Header(out, "kvlearn_blocks_tracked", "gauge", "Distinct blocks known, summed over pools.");
  absl::StrAppend(&out, "kvlearn_blocks_tracked ", g.blocks_tracked, "\n");
  Header(out, "kvlearn_blocks_resident", "gauge",
         "Blocks stored on the nodes in the sidecar's view, summed over pools.");
  absl::StrAppend(&out, "kvlearn_blocks_resident ", g.resident_blocks, "\n");
  Header(out, "kvlearn_resident_bytes", "gauge", "KV bytes of the resident blocks.");
  absl::StrAppend(&out, "kvlearn_resident_bytes ", g.resident_bytes, "\n");
  Header(out, "kvlearn_policy_states_refused_total", "counter",
         "Pools whose policy refused its own saved state at a restart or compaction and "
         "restarted from the resident blocks (a bug to report; decisions stay valid).");
  absl::StrAppend(&out, "kvlearn_policy_states_refused_total ", g.policy_states_refused, "\n");
  Header(out, "kvlearn_event_log_bytes", "gauge",
         "Bytes (keys + values) of the event-log entries retained.");
  absl::StrAppend(&out, "kvlearn_event_log_bytes ", g.log_bytes, "\n");
  Header(out, "kvlearn_event_log_trimmed_bytes_total", "counter",
         "Event-log bytes deleted by --log-max-bytes since start.");
  absl::StrAppend(&out, "kvlearn_event_log_trimmed_bytes_total ", g.log_trimmed_bytes, "\n");
  Header(out, "kvlearn_decision_journal_waits_total", "counter",
         "Admit / RankEviction calls whose journal entry waited for a RocksDB write: both "
         "decision staging files full (decisions faster than the log takes them, or a failed "
         "background write retried).");
  absl::StrAppend(&out, "kvlearn_decision_journal_waits_total ", g.log_decision_waits, "\n");
  Header(out, "kvlearn_event_log_next_sequence", "gauge",
         "Sequence number the next logged event gets (= events ever logged).");
  absl::StrAppend(&out, "kvlearn_event_log_next_sequence ", g.log_next_sequence, "\n");
  Header(out, "kvlearn_model_reloads_total", "counter", "ReloadModel / SIGHUP attempts by result.");
  absl::StrAppend(&out, "kvlearn_model_reloads_total{result=\"ok\"} ", reload_ok_.load(kRelaxed),
                  "\n", "kvlearn_model_reloads_total{result=\"error\"} ",
                  reload_error_.load(kRelaxed), "\n");
  {
    absl::MutexLock lock(&mu_);
    Header(out, "kvlearn_model_info", "gauge",
           "Always 1; labels name the serving policy and model version (empty: none).");
    absl::StrAppend(&out, "kvlearn_model_info{policy=\"", Label(policy_), "\",model_version=\"",
                    Label(model_version_), "\"} 1\n");
  }
  TrafficSummary live;
  {
    absl::MutexLock lock(&traffic_mu_);
    live = traffic_.Summary();
  }
  Header(out, "kvlearn_live_traffic", "gauge",
         "Summary of the request arrivals accepted since start: requests (count), request_rate "
         "(requests/s, node clocks), prompt_blocks (mean block ids per request), block_reuse "
         "(share of block accesses to a block seen before), block_size (tokens, --block-size).");
  absl::StrAppend(&out, "kvlearn_live_traffic{quantity=\"requests\"} ", live.requests, "\n");
  for (const TrafficQuantity& q : TrafficQuantities(live)) {
    absl::StrAppend(&out, "kvlearn_live_traffic{quantity=\"", std::string(q.name), "\"} ",
                    absl::StrFormat("%.9g", q.value), "\n");
  }
  {
    absl::MutexLock lock(&mu_);
    if (model_.has_value()) {
      Header(out, "kvlearn_model_judged", "gauge",
             "1 if the serving model's file carries kvlearn train's verdict, 0 if not judged.");
      absl::StrAppend(&out, "kvlearn_model_judged ", model_->judged ? 1 : 0, "\n");
      Header(out, "kvlearn_model_fit", "gauge",
             "1 if the serving model was judged fit (cheaper than lru and the best heuristic on "
             "its validation split), 0 if unfit or not judged.");
      absl::StrAppend(&out, "kvlearn_model_fit ", model_->fit ? 1 : 0, "\n");
      if (model_->training.has_value() && live.requests > 0) {
        Header(out, "kvlearn_traffic_drift_ratio", "gauge",
               "Live traffic / the serving model's training traffic, per quantity of "
               "kvlearn_live_traffic; beyond 2 or below 0.5 (block_size: any difference) the "
               "model learned other traffic.");
        for (const DriftQuantity& q : CompareTraffic(live, *model_->training).quantities) {
          absl::StrAppend(&out, "kvlearn_traffic_drift_ratio{quantity=\"", std::string(q.name),
                          "\"} ", absl::StrFormat("%.9g", q.ratio), "\n");
        }
      }
    }
  }
  Header(out, "kvlearn_start_time_seconds", "gauge", "Unix time the server started.");
  absl::StrAppend(&out, "kvlearn_start_time_seconds ", absl::StrFormat("%.3f", start_time_seconds_),
                  "\n");
  return out;
}

}  // namespace kvlearn
