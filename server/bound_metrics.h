// The /metrics series of the sidecar's resource bounds and of what the
// engine's word changed (docs/guarantees.md, "Bounds"), rendered in the
// Prometheus text format and appended after the other series. Each bound has
// a gauge of its use or a counter of what it refused, so an operator sees a
// bound being reached before a client reports an error.
//
// Thread-safety: RenderBoundMetrics reads relaxed atomics only and may be
// called from any thread.
#pragma once

#include <string>

#include "server/node_pools.h"

namespace kvlearn {

class EventLog;
class MetricsHttpServer;

std::string RenderBoundMetrics(const PoolCounters& pools, const EventLog& log,
                               const MetricsHttpServer& http);

}  // namespace kvlearn
