// --since / --until: the window of an event log read as a trace
// (cli/logged_trace.h), in the unit of the exported trace's `timestamp`:
// milliseconds of the nodes' clocks (the events' timestamp_us / 1000).
// export-log, train --data-dir and model evaluate take the same two flags.
#pragma once

#include <cstdint>

#include "CLI/CLI.hpp"

namespace kvlearn {

inline void AddLogWindowFlags(CLI::App* cmd, int64_t& since_ms, int64_t& until_ms) {
  cmd->add_option("--since", since_ms,
                  "only request arrivals at or after this time: milliseconds of the nodes' "
                  "clocks, the `timestamp` export-log writes (default: the log's first)");
  cmd->add_option("--until", until_ms,
                  "only request arrivals before this time, in the same unit (default: up to "
                  "the log's last)");
}

}  // namespace kvlearn
