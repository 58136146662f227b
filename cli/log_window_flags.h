// --since / --until: the window of an event log read as a trace
// (cli/logged_trace.h), in the unit of the exported trace's `timestamp`:
// milliseconds of the nodes' clocks (the events' timestamp_us / 1000).
// export-log, train --data-dir and model evaluate take the same two flags.
#pragma once

#include "CLI/CLI.hpp"
#include "cli/logged_trace.h"

namespace kvlearn {

inline void AddLogWindowFlags(CLI::App* cmd, LoggedTraceOptions& read) {
  cmd->add_option("--since", read.since_ms,
                  "only request arrivals at or after this time: milliseconds of the nodes' "
                  "clocks, the `timestamp` export-log writes (default: the log's first)");
  cmd->add_option("--until", read.until_ms,
                  "only request arrivals before this time, in the same unit (default: up to "
                  "the log's last)");
}

}  // namespace kvlearn
