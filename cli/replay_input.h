// What a replay reads, as compare (one pool and --cluster) and train read
// it. The model first (LoadModelForReplay): a model of other blocks, or a
// policy that needs a model given none, is refused before the trace is read.
// Then the trace (ReadTraceForReplay), so the three say the same things about it:
// how many bad lines --lenient skipped, how many requests it dropped because
// their block ids contradict earlier lines (datasets/prefix_conflicts.h), and,
// without --lenient, what to do about such a trace (one node's export, or
// --lenient). With --lenient the command goes on, exit status 0, as long as a
// request is left.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "datasets/mooncake_reader.h"
#include "datasets/trace.h"
#include "models/learned_model.h"
#include "sim/replay_trace.h"

namespace kvlearn {

// The model at `path` (nullptr when `path` is empty), refused when it was
// trained on another block size than `block_size`, or when one of `policies`
// needs a model and none is given.
absl::StatusOr<std::shared_ptr<const LearnedModel>> LoadModelForReplay(
    const std::string& path, uint32_t block_size, const std::vector<std::string>& policies);

// Reads `path` into `trace` and builds its replay; notes go to `err`, each
// line prefixed "kvlearn COMMAND: ". Fails when the trace cannot be read, has
// no request left, or (without options.lenient) is not made of prefix hashes.
// REQUIRES: `trace` outlives the result, and is not moved.
absl::StatusOr<ReplayTrace> ReadTraceForReplay(const std::string& path,
                                               const TraceReadOptions& options,
                                               const CostModel& cost, std::string_view command,
                                               std::ostream& err, Trace& trace);

// The same for a trace already in `trace` (read from an event log: `path`
// names it in messages): --lenient's skipped requests, the replay.
absl::StatusOr<ReplayTrace> PrepareTraceForReplay(const std::string& path,
                                                  const TraceReadOptions& options,
                                                  const CostModel& cost, std::string_view command,
                                                  std::ostream& err, Trace& trace);

}  // namespace kvlearn
