// `kvlearn export-log`: turns the sidecar's event log into a Mooncake JSONL
// trace (one line per request-arrival event) for `kvlearn train` / `compare`,
// through the reader `kvlearn train --data-dir` uses (cli/logged_trace.h).
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "cli/log_window_flags.h"
#include "cli/logged_trace.h"
#include "datasets/mooncake_reader.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/event_log.h"

namespace kvlearn {
namespace {

struct ExportFlags {
  std::string data_dir;
  std::string out;
  LoggedTraceOptions read;  // --node, --block-size, --since, --until
  bool list_nodes = false;
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
  auto logged = ReadLoggedTraceIn(f.data_dir, f.read, "export-log", f.quiet);
  if (!logged.ok()) return Fail(logged.status());
  Trace& trace = logged->trace;
  trace.source = f.data_dir;
  if (auto s = WriteMooncakeTrace(trace, f.out); !s.ok()) return Fail(s);
  TraceReadOptions back_options;
  back_options.block_size = f.read.block_size;
  auto back = ReadMooncakeTrace(f.out, back_options);
  if (!back.ok()) return Fail(back.status());
  std::cerr << "kvlearn export-log: wrote " << trace.requests.size() << " requests ("
            << trace.hash_ids.size() << " block ids) to " << f.out << " from " << logged->events
            << " logged events (" << logged->other << " not request arrivals"
            << (f.read.node.empty() ? "" : " or of other nodes") << ", " << logged->adjusted
            << " with input_length set to whole blocks";
  if (logged->outside > 0) std::cerr << ", " << logged->outside << " outside the window";
  std::cerr << "); sequences " << logged->first_sequence << ".." << logged->next_sequence << "\n";
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
  cmd->add_option("--node", f->read.node, "only this node's requests");
  cmd->add_flag("--list-nodes", f->list_nodes,
                "write nothing; print each node with request arrivals and their count (node id, "
                "a tab, the count), one a line, sorted by id")
      ->excludes("--out")
      ->excludes("--node");
  cmd->add_option("--block-size", f->read.block_size, "tokens per block of the trace")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  AddLogWindowFlags(cmd, f->read);
  cmd->add_flag("--quiet", f->quiet,
                "no progress line (drawn on stderr only when it is a terminal: events scanned "
                "of the log's, rate, ETA)");
  return {cmd, [f] { return RunExport(*f); }};
}

}  // namespace kvlearn
