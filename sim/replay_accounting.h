// Turns what each request got from the pool into a ReplayResult: requests go
// round-robin to FIFO prefill nodes (TTFT = queue wait + load of the hit
// prefix + prefill of the missed tokens; a node is busy for the load and the
// prefill), and counters cover the requests from `eval_start` on. The
// admission copy node -> pool runs in the background: it counts in
// transfer_seconds, not in TTFT or busy time. The simulator and the sidecar's load generator both
// count through this class, which is what lets a test demand equal results.
//
// REQUIRES: Record is called for every request in trace order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cost_model.h"
#include "core/request_price.h"
#include "datasets/trace.h"
#include "sim/replay_result.h"

namespace kvlearn {

class ReplayAccounting {
 public:
  ReplayAccounting(const CostModel& cost, uint32_t prefill_nodes, uint32_t eval_start)
      : cost_(cost), node_free_ms_(prefill_nodes, 0.0), eval_start_(eval_start) {}

  void Record(uint32_t index, const TraceRequest& r, const RequestOutcome& o) {
    const RequestPrice p =
        PriceRequest(cost_, o.hit_tokens, r.input_length, o.loaded_bytes, o.admitted_bytes);
    double& node_free = node_free_ms_[index % node_free_ms_.size()];
    const double arrival = static_cast<double>(r.timestamp_ms);
    node_free = std::max(arrival, node_free) + p.load_ms + p.prefill_ms;
    if (index < eval_start_) return;
    AddRequest(result_, r, o,
               {p.prefill_ms, cost_.GpusPerInstance(), p.transfer_ms, p.load_ms + p.prefill_ms});
    ttft_ms_.push_back(node_free - arrival);
  }

  // The counters and the TTFT summary; the caller fills policy and timing.
  ReplayResult Finish() {
    result_.ttft_ms = Summarize(ttft_ms_);
    result_.prefill_nodes = static_cast<uint32_t>(node_free_ms_.size());
    return result_;
  }

 private:
  const CostModel& cost_;
  std::vector<double> node_free_ms_;
  uint32_t eval_start_;
  ReplayResult result_;
  std::vector<double> ttft_ms_;
};

}  // namespace kvlearn
