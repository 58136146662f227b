#include "cli/logged_trace.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/progress_line.h"
#include "kvlearn/v1/retention.pb.h"

namespace kvlearn {
namespace {

// Names kept for messages; a fleet's log can hold many more nodes.
constexpr size_t kNamedNodes = 1000;

struct Row {
  int64_t timestamp_ms;
  uint64_t arrival;  // order in the log: ties of timestamp keep it
  uint32_t input_length, output_length;
  std::vector<uint64_t> ids;
};

// The trace's order: by timestamp, then as logged.
bool Earlier(const Row& a, const Row& b) {
  return a.timestamp_ms != b.timestamp_ms ? a.timestamp_ms < b.timestamp_ms : a.arrival < b.arrival;
}

}  // namespace

namespace {

// Calls `keep` on every request arrival of `log` inside the window of
// `options`, counting in `out` the events scanned and those left out.
absl::Status ScanArrivals(
    const EventLog& log, const LoggedTraceOptions& options, LoggedTrace& out,
    const std::function<void(int64_t timestamp_ms, const v1::RequestArrival&)>& keep) {
  v1::Event e;
  return log.ForEach([&](uint64_t seq, std::string_view value) -> absl::Status {
    ++out.events;
    if (options.events_done != nullptr) {
      options.events_done->fetch_add(1, std::memory_order_relaxed);
    }
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("event ", seq, " does not parse"));
    }
    if (!e.has_request_arrival() || (!options.node.empty() && e.node_id() != options.node)) {
      if (e.has_request_arrival() && out.other_nodes.size() < kNamedNodes) {
        out.other_nodes.insert(e.node_id());
      }
      ++out.other;
      return absl::OkStatus();
    }
    const int64_t timestamp_ms = e.timestamp_us() / 1000;
    if (timestamp_ms < options.since_ms || timestamp_ms >= options.until_ms) {
      ++out.outside;
      return absl::OkStatus();
    }
    if (out.nodes.size() < kNamedNodes) out.nodes.insert(e.node_id());
    keep(timestamp_ms, e.request_arrival());
    return absl::OkStatus();
  });
}

std::span<const uint64_t> IdsOf(const v1::RequestArrival& r) {
  return {reinterpret_cast<const uint64_t*>(r.block_ids().data()),
          static_cast<size_t>(r.block_ids().size())};
}

}  // namespace

absl::StatusOr<LoggedTrace> ReadLoggedTrace(const EventLog& log,
                                            const LoggedTraceOptions& options) {
  LoggedTrace out;
  out.first_sequence = log.first_sequence();
  out.next_sequence = log.next_sequence();
  if (options.max_accesses > 0) {
    // First pass: the block accesses of each branch bucket, to pick the
    // buckets that fit the budget (learner/chain_sample.h).
    LoggedTrace counted;
    ChainBucketCounts counts;
    auto scanned = ScanArrivals(
        log, options, counted, [&](int64_t, const v1::RequestArrival& r) { counts.Add(IdsOf(r)); });
    if (!scanned.ok()) return scanned;
    out.sample = PlanChainSample(counts, options.max_accesses);
  }
  std::vector<Row> rows;  // with newest_requests: a heap, the earliest on top
  uint64_t arrivals = 0;
  const auto later = [](const Row& a, const Row& b) { return Earlier(b, a); };
  auto scanned =
      ScanArrivals(log, options, out, [&](int64_t timestamp_ms, const v1::RequestArrival& r) {
        if (!out.sample.Keeps(IdsOf(r))) {
          ++out.sampled_out;
          return;
        }
        Row row;
        row.timestamp_ms = timestamp_ms;
        row.arrival = arrivals++;
        row.output_length = static_cast<uint32_t>(std::min<int64_t>(r.output_length(), UINT32_MAX));
        row.ids.assign(r.block_ids().begin(), r.block_ids().end());
        int64_t tokens = r.input_length();
        if (tokens <= 0 && !r.block_tokens().empty()) {
          tokens = 0;
          for (int64_t t : r.block_tokens()) tokens += t;
        }
        const auto n = static_cast<uint32_t>(row.ids.size());
        if (tokens <= 0 || tokens > UINT32_MAX ||
            BlocksForTokens(static_cast<uint32_t>(tokens), options.block_size) != n) {
          tokens = int64_t{n} * options.block_size;  // the node's block size differs: whole blocks
          ++out.adjusted;
        }
        row.input_length = static_cast<uint32_t>(tokens);
        rows.push_back(std::move(row));
        if (options.newest_requests > 0) {
          std::push_heap(rows.begin(), rows.end(), later);
          if (rows.size() > options.newest_requests) {
            std::pop_heap(rows.begin(), rows.end(), later);
            rows.pop_back();
          }
        }
      });
  if (!scanned.ok()) return scanned;
  if (rows.empty()) {
    const std::string window =
        out.outside > 0 ? absl::StrCat(" (", out.outside, " outside --since/--until)") : "";
    if (!out.other_nodes.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no request arrivals of node ", options.node, window, " among ", out.events,
          " logged events; nodes with arrivals: ", absl::StrJoin(out.other_nodes, ", ")));
    }
    if (out.outside > 0) {
      return absl::NotFoundError(
          absl::StrCat("no request arrivals", window, " among ", out.events, " logged events"));
    }
    return absl::NotFoundError(absl::StrCat(
        "no request arrivals among ", out.events,
        " logged events, so no trace: a sidecar fed only by --engine-events logs the "
        "engines' block stores and removals, and engines do not report requests; the router "
        "or client reports them (RequestArrival, docs/sidecar.md)"));
  }
  // Nodes' clocks interleave; a trace is in time order. The newest requests
  // are the last of all of them, numbered as such.
  std::sort(rows.begin(), rows.end(), Earlier);
  out.trace.block_size = options.block_size;
  auto line = static_cast<uint32_t>(arrivals - rows.size());
  for (const Row& r : rows) {
    out.trace.Add(r.timestamp_ms, r.input_length, r.output_length, r.ids, ++line);
  }
  return out;
}

absl::StatusOr<LoggedTrace> ReadLoggedTraceIn(const std::string& data_dir,
                                              LoggedTraceOptions options,
                                              const std::string& command, bool quiet) {
  // Read-only: a sidecar may be appending to it (what it logs after this
  // open is not read).
  auto log = EventLog::OpenReadOnly(data_dir);
  if (!log.ok()) return log.status();
  // Sampling reads the log twice.
  const uint64_t passes = options.max_accesses > 0 ? 2 : 1;
  ProgressLine progress(absl::StrCat("kvlearn ", command, ": scanned"),
                        passes * ((*log)->next_sequence() - (*log)->first_sequence()), "events",
                        ProgressLine::Wanted(STDERR_FILENO, quiet), std::cerr);
  options.events_done = &progress.counter();
  progress.Start();
  auto logged = ReadLoggedTrace(**log, options);
  progress.Finish();
  if (logged.ok() && logged->nodes.size() > 1) {
    // Nodes that number blocks each their own way interleave into a trace
    // whose ids are not prefix hashes, which compare and train refuse.
    std::cerr << "kvlearn " << command << ": note: requests of " << logged->nodes.size()
              << " nodes (" << absl::StrJoin(logged->nodes, ", ")
              << ") in one trace; if their block ids are not shared prefix hashes, compare "
                 "and train refuse it: pass --node ID for one node's\n";
  }
  return logged;
}

}  // namespace kvlearn
