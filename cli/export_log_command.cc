// `kvlearn export-log`: turns the sidecar's event log into a Mooncake JSONL
// trace (one line per request-arrival event) for `kvlearn train` / `compare`,
// through the reader `kvlearn train --data-dir` uses (cli/logged_trace.h).
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/log_window_flags.h"
#include "cli/logged_trace.h"
#include "datasets/mooncake_reader.h"

namespace kvlearn {
namespace {

struct ExportFlags {
  std::string data_dir;
  std::string out;
  LoggedTraceOptions read;  // --node, --block-size, --since, --until
  bool quiet = false;
};

int Fail(const absl::Status& s) {
  std::cerr << "kvlearn export-log: " << s.message() << "\n";
  return 1;
}

int RunExport(const ExportFlags& f) {
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
  cmd->add_option("--out", f->out, "trace file to write")->required();
  cmd->add_option("--node", f->read.node, "only this node's requests");
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
