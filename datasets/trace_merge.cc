// Merging generated traces (see trace_merge.h).

#include "datasets/trace_merge.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kvlearn {

Trace MergeTraces(const std::vector<Trace>& parts, uint32_t block_size, std::string source,
                  std::vector<uint32_t>* part_of) {
  // Each part's ids are dense from 0; shift each past the previous parts'.
  std::vector<uint64_t> offset(parts.size(), 0);
  for (size_t p = 1; p < parts.size(); ++p) {
    uint64_t max_id = 0;
    for (uint64_t id : parts[p - 1].hash_ids) max_id = std::max(max_id, id);
    offset[p] = offset[p - 1] + max_id + 1;
  }

  Trace trace;
  trace.source = std::move(source);
  trace.block_size = block_size;
  if (part_of != nullptr) part_of->clear();
  std::vector<size_t> next(parts.size(), 0);
  std::vector<uint64_t> ids;
  while (true) {
    size_t best = parts.size();
    for (size_t p = 0; p < parts.size(); ++p) {
      if (next[p] == parts[p].requests.size()) continue;
      if (best == parts.size() ||
          parts[p].requests[next[p]].timestamp_ms < parts[best].requests[next[best]].timestamp_ms) {
        best = p;
      }
    }
    if (best == parts.size()) break;
    const TraceRequest& r = parts[best].requests[next[best]++];
    const auto chain = parts[best].BlocksOf(r);
    if (trace.hash_ids.size() + chain.size() > std::numeric_limits<uint32_t>::max()) break;
    ids.assign(chain.begin(), chain.end());
    for (uint64_t& id : ids) id += offset[best];
    trace.Add(r.timestamp_ms, r.input_length, r.output_length, ids);
    if (part_of != nullptr) part_of->push_back(static_cast<uint32_t>(best));
  }
  return trace;
}

}  // namespace kvlearn
