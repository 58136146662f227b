// Whether two traces hold the same requests and ids: arrival, lengths and
// block ranges per request. Ignores where they came from (source, line
// numbers), so a generated trace equals its own read-back.
#pragma once

#include "datasets/trace.h"

namespace kvlearn {

inline bool SameTrace(const Trace& a, const Trace& b) {
  if (a.requests.size() != b.requests.size() || a.hash_ids != b.hash_ids) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const TraceRequest& x = a.requests[i];
    const TraceRequest& y = b.requests[i];
    if (x.timestamp_ms != y.timestamp_ms || x.input_length != y.input_length ||
        x.output_length != y.output_length || x.first_block != y.first_block ||
        x.num_blocks != y.num_blocks) {
      return false;
    }
  }
  return true;
}

}  // namespace kvlearn
