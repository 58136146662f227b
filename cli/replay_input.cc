#include "cli/replay_input.h"

#include "absl/strings/str_cat.h"
#include "datasets/prefix_conflicts.h"
#include "models/model_block_size.h"
#include "policies/policy_factory.h"

namespace kvlearn {

absl::StatusOr<std::shared_ptr<const LearnedModel>> LoadModelForReplay(
    const std::string& path, uint32_t block_size, const std::vector<std::string>& policies) {
  std::shared_ptr<const LearnedModel> model;
  if (!path.empty()) {
    auto loaded = LearnedModel::Load(path);
    if (!loaded.ok()) return loaded.status();
    if (auto st =
            CheckModelBlockSize((*loaded)->metadata(), block_size, path, "the trace is read as");
        !st.ok()) {
      return st;
    }
    model = *loaded;
  }
  for (const auto& p : policies) {
    if (PolicyNeedsModel(p) && model == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policies: '", p, "' needs a trained model: add --model FILE"));
    }
  }
  return model;
}

absl::StatusOr<ReplayTrace> ReadTraceForReplay(const std::string& path,
                                               const TraceReadOptions& options,
                                               const CostModel& cost, std::string_view command,
                                               std::ostream& err, Trace& trace) {
  auto read = ReadTrace(path, options);
  if (!read.ok()) return read.status();
  trace = *std::move(read);
  return PrepareTraceForReplay(path, options, cost, command, err, trace);
}

absl::StatusOr<ReplayTrace> PrepareTraceForReplay(const std::string& path,
                                                  const TraceReadOptions& options,
                                                  const CostModel& cost, std::string_view command,
                                                  std::ostream& err, Trace& trace) {
  if (trace.skipped_lines > 0) {
    err << "kvlearn " << command << ": skipped " << trace.skipped_lines
        << " bad lines (--lenient)\n";
  }
  if (options.lenient) {
    const DroppedRequests dropped = DropRequestsBreakingPrefixes(trace);
    if (dropped.requests > 0) {
      err << "kvlearn " << command << ": skipped " << dropped.requests
          << " requests whose block ids contradict earlier lines' (the first on line "
          << dropped.first_line
          << "): ids numbered by several nodes each their own way? (--lenient; kvlearn "
             "export-log --node ID writes one node's)\n";
    }
  }
  if (trace.requests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": trace has no requests", options.lenient ? " left (--lenient)" : ""));
  }
  auto replay = BuildReplayTrace(trace, cost);
  if (!replay.ok() && absl::IsInvalidArgument(replay.status())) {
    // The only refusal of BuildReplayTrace: one id behind two parents.
    return absl::InvalidArgumentError(absl::StrCat(
        replay.status().message(),
        ". A trace exported from several nodes that number blocks each their own way mixes "
        "numberings: export one node's (kvlearn export-log --node ID), or pass --lenient to skip "
        "the requests that contradict earlier lines"));
  }
  return replay;
}

}  // namespace kvlearn
