// Merging generated traces into one: the traffic of several generators
// (chat, fan-out, batch, rag, coder) sharing one cluster, as `mixed` and
// `shift` build it. Internal to datasets/.
//
// Thread-safety: a pure function; call it from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/trace.h"

namespace kvlearn {

// Moves each part's ids past the previous parts' (so no two parts share a
// block) and merges the parts' requests by arrival time; ties keep the parts'
// order, so the merge is deterministic. Stops early (fewer requests) if the
// trace would hold more than 2^32 ids. When `part_of` is not null it receives,
// per request of the result, the index of the part it came from.
Trace MergeTraces(const std::vector<Trace>& parts, uint32_t block_size, std::string source,
                  std::vector<uint32_t>* part_of = nullptr);

}  // namespace kvlearn
