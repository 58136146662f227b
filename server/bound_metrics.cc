#include "server/bound_metrics.h"

#include "absl/strings/str_cat.h"
#include "server/event_log.h"
#include "server/metrics_http_server.h"
#include "server/request_validation.h"

namespace kvlearn {
namespace {

void Series(std::string& out, const char* name, const char* type, const std::string& help,
            uint64_t value) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

uint64_t Load(const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); }

}  // namespace

std::string RenderBoundMetrics(const PoolCounters& pools, const EventLog& log,
                               const MetricsHttpServer& http) {
  std::string out;
  Series(out, "kvlearn_removed_descendants_total", "counter",
         "Blocks that left a pool because the node removed one of their ancestors (a block "
         "without its prefix is unreachable), start-up replay included.",
         Load(pools.removed_descendants));
  Series(out, "kvlearn_nodes", "gauge", "Distinct node ids with pools (bound: --max-nodes).",
         Load(pools.nodes));
  Series(out, "kvlearn_nodes_refused_total", "counter",
         "Events and calls refused (RESOURCE_EXHAUSTED) because they would add a node past "
         "--max-nodes.",
         Load(pools.nodes_refused));
  Series(out, "kvlearn_requests_refused_in_flight_total", "counter",
         "Request arrivals refused (RESOURCE_EXHAUSTED): their pool had --max-requests-in-flight "
         "requests in flight.",
         Load(pools.requests_refused_in_flight));
  Series(out, "kvlearn_requests_refused_pinned_blocks_total", "counter",
         "Request arrivals refused (RESOURCE_EXHAUSTED): their chain would take their pool's "
         "pinned blocks past --max-pinned-blocks.",
         Load(pools.requests_refused_pinned_blocks));
  Series(out, "kvlearn_requests_expired_total", "counter",
         "Requests released without their request_finished, --request-timeout-seconds after "
         "their arrival by their pool's event timestamps (start-up replay included).",
         Load(pools.requests_expired));
  Series(out, "kvlearn_string_fields_refused_total", "counter",
         absl::StrCat("Events, calls and batches refused (INVALID_ARGUMENT) for a string field "
                      "over its fixed cap of ",
                      kMaxStringFieldBytes,
                      " bytes: node ids, request ids, batch sources, transfer_finished.src/.dst."),
         Load(pools.string_fields_refused));
  Series(out, "kvlearn_event_log_failed_writes_total", "counter",
         "RocksDB writes of the event log that failed (a full disk, an I/O error); each later "
         "write first asks RocksDB to resume.",
         log.failed_writes());
  Series(out, "kvlearn_event_log_refused_events_total", "counter",
         "Events not logged because their append failed (the reporter got UNAVAILABLE; an "
         "engine's are counted in kvlearn_engine_log_failures_total too).",
         log.refused_events());
  Series(out, "kvlearn_event_log_recoveries_total", "counter",
         "Writes that succeeded right after a failed one: the log taking writes again without "
         "a restart.",
         log.recoveries());
  Series(out, "kvlearn_metrics_connections_cut_total", "counter",
         "/metrics connections closed unanswered: past --metrics-request-timeout-seconds, or "
         "the oldest still sending its request when --metrics-max-connections were open.",
         http.connections_cut());
  Series(out, "kvlearn_metrics_max_connections", "gauge",
         "/metrics connections allowed open at once (--metrics-max-connections).",
         static_cast<uint64_t>(http.max_connections()));
  return out;
}

}  // namespace kvlearn
