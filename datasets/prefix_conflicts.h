// Requests whose block ids contradict the trace's earlier requests: a block id
// stands for its whole prefix, so it has one parent everywhere it appears. A
// trace that interleaves nodes numbering blocks each their own way (an
// export-log of several engines) breaks that, and the replay refuses it
// (sim/replay_trace.h). With --lenient, compare and train drop such requests
// instead, as they skip bad lines, and replay the rest.
//
// Thread-safety: a function of its argument; call it before the trace is
// shared.
#pragma once

#include <cstdint>

#include "datasets/trace.h"

namespace kvlearn {

struct DroppedRequests {
  uint64_t requests = 0;
  uint32_t first_line = 0;  // source line of the first dropped request (0 when none)
};

// Keeps, in order, each request whose every block id has the parent (or no
// parent, at position 0) that the requests kept before it gave that id, and
// removes the others from `trace`. A trace whose ids are prefix hashes is left
// as it was.
DroppedRequests DropRequestsBreakingPrefixes(Trace& trace);

}  // namespace kvlearn
