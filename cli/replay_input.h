// Reads a trace and makes it ready for replay, as compare (one pool and
// --cluster) and train do, so the three say the same things about a trace:
// how many bad lines --lenient skipped, how many requests it dropped because
// their block ids contradict earlier lines (datasets/prefix_conflicts.h), and,
// without --lenient, what to do about such a trace (one node's export, or
// --lenient). With --lenient the command goes on, exit status 0, as long as a
// request is left.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "datasets/mooncake_reader.h"
#include "datasets/trace.h"
#include "sim/replay_trace.h"

namespace kvlearn {

// Reads `path` into `trace` and builds its replay; notes go to `err`, each
// line prefixed "kvlearn COMMAND: ". Fails when the trace cannot be read, has
// no request left, or (without options.lenient) is not made of prefix hashes.
// REQUIRES: `trace` outlives the result, and is not moved.
absl::StatusOr<ReplayTrace> ReadTraceForReplay(const std::string& path,
                                               const TraceReadOptions& options,
                                               const CostModel& cost, std::string_view command,
                                               std::ostream& err, Trace& trace);

}  // namespace kvlearn
