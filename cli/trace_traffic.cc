#include "cli/trace_traffic.h"

#include <algorithm>

namespace kvlearn {

TrafficSummary SummarizeTraceTraffic(const Trace& trace, uint32_t count_from, uint32_t end) {
  TrafficSummarizer summarizer(trace.block_size);
  end = std::min<uint32_t>(end, static_cast<uint32_t>(trace.requests.size()));
  for (uint32_t i = 0; i < end; ++i) {
    const TraceRequest& r = trace.requests[i];
    summarizer.Add(static_cast<double>(r.timestamp_ms) / 1000.0, trace.BlocksOf(r),
                   i >= count_from);
  }
  return summarizer.Summary();
}

}  // namespace kvlearn
