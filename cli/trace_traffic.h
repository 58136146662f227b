// The traffic summary (models/traffic_summary.h) of a trace's requests
// [count_from, end), blocks of the earlier requests counted as seen: what
// `kvlearn train` records for its training split and `kvlearn compare` prints
// for the requests it evaluates.
#pragma once

#include <cstdint>

#include "datasets/trace.h"
#include "models/traffic_summary.h"

namespace kvlearn {

TrafficSummary SummarizeTraceTraffic(const Trace& trace, uint32_t count_from, uint32_t end);

}  // namespace kvlearn
