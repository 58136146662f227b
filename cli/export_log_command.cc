// `kvlearn export-log`: turns the sidecar's event log into a Mooncake JSONL
// trace (one line per request-arrival event) for `kvlearn train` / `compare`.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command.h"
#include "core/progress_line.h"
#include "datasets/mooncake_reader.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"

namespace kvlearn {
namespace {

struct ExportFlags {
  std::string data_dir;
  std::string out;
  std::string node;  // empty: every node
  bool list_nodes = false;
  uint32_t block_size = 512;
  bool quiet = false;
};

int Fail(const absl::Status& s) {
  std::cerr << "kvlearn export-log: " << s.message() << "\n";
  return 1;
}

// --list-nodes: each node with request arrivals and how many, one a line, so
// a script can export the nodes one by one (`--node`) without knowing them.
int ListNodes(const ExportFlags& f) {
  auto log = EventLog::OpenReadOnly(f.data_dir);
  if (!log.ok()) return Fail(log.status());
  std::map<std::string, uint64_t> arrivals;
  v1::Event e;
  auto scanned = (*log)->ForEach([&](uint64_t seq, std::string_view value) -> absl::Status {
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("event ", seq, " does not parse"));
    }
    if (e.has_request_arrival()) ++arrivals[e.node_id()];
    return absl::OkStatus();
  });
  if (!scanned.ok()) return Fail(scanned);
  for (const auto& [node, n] : arrivals) std::cout << node << "\t" << n << "\n";
  return 0;
}

int RunExport(const ExportFlags& f) {
  if (f.list_nodes) return ListNodes(f);
  if (f.out.empty()) return Fail(absl::InvalidArgumentError("--out is required (or --list-nodes)"));
  auto log = EventLog::OpenReadOnly(f.data_dir);
  if (!log.ok()) return Fail(log.status());
  struct Row {
    int64_t timestamp_ms;
    uint32_t input_length, output_length;
    std::vector<uint64_t> ids;
  };
  std::vector<Row> rows;
  uint64_t events = 0, other = 0, adjusted = 0;
  std::set<std::string> nodes, other_nodes;  // with request arrivals: exported, left out
  ProgressLine progress("kvlearn export-log: scanned",
                        (*log)->next_sequence() - (*log)->first_sequence(), "events",
                        ProgressLine::Wanted(STDERR_FILENO, f.quiet), std::cerr);
  progress.Start();
  v1::Event e;
  auto scanned = (*log)->ForEach([&](uint64_t seq, std::string_view value) -> absl::Status {
    ++events;
    progress.Add(1);
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("event ", seq, " does not parse"));
    }
    if (!e.has_request_arrival() || (!f.node.empty() && e.node_id() != f.node)) {
      if (e.has_request_arrival() && other_nodes.size() < 1000) other_nodes.insert(e.node_id());
      ++other;
      return absl::OkStatus();
    }
    if (nodes.size() < 1000) nodes.insert(e.node_id());
    const auto& r = e.request_arrival();
    Row row;
    row.timestamp_ms = e.timestamp_us() / 1000;
    row.output_length = static_cast<uint32_t>(std::min<int64_t>(r.output_length(), UINT32_MAX));
    row.ids.assign(r.block_ids().begin(), r.block_ids().end());
    int64_t tokens = r.input_length();
    if (tokens <= 0 && !r.block_tokens().empty()) {
      tokens = 0;
      for (int64_t t : r.block_tokens()) tokens += t;
    }
    const auto n = static_cast<uint32_t>(row.ids.size());
    if (tokens <= 0 || tokens > UINT32_MAX ||
        BlocksForTokens(static_cast<uint32_t>(tokens), f.block_size) != n) {
      tokens = int64_t{n} * f.block_size;  // the node's block size differs: assume full blocks
      ++adjusted;
    }
    row.input_length = static_cast<uint32_t>(tokens);
    rows.push_back(std::move(row));
    return absl::OkStatus();
  });
  progress.Finish();
  if (!scanned.ok()) return Fail(scanned);
  // An empty trace only fails later, in compare or train, far from its cause:
  // refuse here and say why nothing matched.
  if (rows.empty()) {
    if (!other_nodes.empty()) {
      return Fail(absl::NotFoundError(
          absl::StrCat("no request arrivals of node ", f.node, " among ", events,
                       " logged events; nodes with arrivals: ", absl::StrJoin(other_nodes, ", "))));
    }
    return Fail(absl::NotFoundError(absl::StrCat(
        "no request arrivals among ", events,
        " logged events, so no trace to write: a sidecar fed only by --engine-events logs the "
        "engines' block stores and removals, and engines do not report requests; the router "
        "or client reports them (RequestArrival, docs/sidecar.md)")));
  }
  if (nodes.size() > 1) {
    // Nodes that number blocks each their own way interleave into a trace
    // whose ids are not prefix hashes, which compare refuses.
    std::cerr << "kvlearn export-log: note: requests of " << nodes.size() << " nodes ("
              << absl::StrJoin(nodes, ", ")
              << ") in one trace; if their block ids are not shared prefix hashes, compare "
                 "and train refuse it: pass --node ID for one node's\n";
  }
  // Nodes' clocks interleave; the trace format wants time order.
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.timestamp_ms < b.timestamp_ms; });
  Trace trace;
  trace.source = f.data_dir;
  trace.block_size = f.block_size;
  for (const Row& r : rows) trace.Add(r.timestamp_ms, r.input_length, r.output_length, r.ids);
  if (auto s = WriteMooncakeTrace(trace, f.out); !s.ok()) return Fail(s);
  TraceReadOptions read;
  read.block_size = f.block_size;
  auto back = ReadMooncakeTrace(f.out, read);
  if (!back.ok()) return Fail(back.status());
  std::cerr << "kvlearn export-log: wrote " << trace.requests.size() << " requests ("
            << trace.hash_ids.size() << " block ids) to " << f.out << " from " << events
            << " logged events (" << other << " not request arrivals"
            << (f.node.empty() ? "" : " or of other nodes") << ", " << adjusted
            << " with input_length set to whole blocks); sequences " << (*log)->first_sequence()
            << ".." << (*log)->next_sequence() << "\n";
  return 0;
}

}  // namespace

Command AddExportLogCommand(CLI::App& root) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* cmd = root.add_subcommand(
      "export-log",
      "Write the request arrivals in a sidecar event log as a Mooncake JSONL trace (readable by "
      "compare and train). Works while the server runs.");
  cmd->add_option("--data-dir", f->data_dir, "the server's --data-dir")->required();
  cmd->add_option("--out", f->out, "trace file to write (required unless --list-nodes)");
  cmd->add_option("--node", f->node, "only this node's requests");
  cmd->add_flag("--list-nodes", f->list_nodes,
                "write nothing; print each node with request arrivals and their count (node id, "
                "a tab, the count), one a line, sorted by id")
      ->excludes("--out")
      ->excludes("--node");
  cmd->add_option("--block-size", f->block_size, "tokens per block of the trace")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_flag("--quiet", f->quiet,
                "no progress line (drawn on stderr only when it is a terminal: events scanned "
                "of the log's, rate, ETA)");
  return {cmd, [f] { return RunExport(*f); }};
}

}  // namespace kvlearn
