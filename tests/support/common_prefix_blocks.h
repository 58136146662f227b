// CommonPrefixBlocks: how many leading blocks every request of a trace
// shares. In a generated trace with one shared system prompt (or repository
// context) these are its full blocks, and the block after them is the first
// one a conversation, burst or session owns, which the generator tests use
// to tell those apart.
#pragma once

#include <cstddef>

#include "datasets/trace.h"

namespace kvlearn {

// REQUIRES: !trace.requests.empty().
inline size_t CommonPrefixBlocks(const Trace& trace) {
  const auto first = trace.BlocksOf(trace.requests[0]);
  size_t common = first.size();
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    size_t k = 0;
    while (k < common && k < ids.size() && ids[k] == first[k]) ++k;
    common = k;
  }
  return common;
}

}  // namespace kvlearn
