// What serving one request costs in the cost model's units, given what the
// pool gave it: the prefill of the tokens it missed, one load of the hit
// prefix and one admission copy of the blocks kept. The one formula the pool
// replay (sim/replay_accounting.h) and the sidecar's experiment counters
// (server/experiment_costs.h) both price a request with, so they agree.
#pragma once

#include <cstdint>

#include "core/cost_model.h"

namespace kvlearn {

struct RequestPrice {
  double load_ms = 0;      // hit prefix, pool -> prefill node
  double prefill_ms = 0;   // the missed tokens, on one prefill instance
  double transfer_ms = 0;  // load + admission copy (prefill node -> pool)
};

inline RequestPrice PriceRequest(const CostModel& cost, uint64_t hit_tokens, uint64_t input_tokens,
                                 uint64_t loaded_bytes, uint64_t admitted_bytes) {
  RequestPrice p;
  p.load_ms = cost.TransferMs(loaded_bytes);
  p.prefill_ms = cost.RecomputeMs(hit_tokens, input_tokens);
  p.transfer_ms = p.load_ms + cost.TransferMs(admitted_bytes);
  return p;
}

}  // namespace kvlearn
