// The request arrivals in a sidecar's event log (server/event_log.h) as a
// Trace: the one reader behind `kvlearn export-log` (which writes it as JSONL)
// and `kvlearn train --data-dir` (which learns from it), so training from the
// log and from the exported file of the same events cannot differ.
//
// A request is one RequestArrival event: its timestamp (µs, the node's clock)
// in whole milliseconds, its block ids, its input_length (the block tokens'
// sum when it gives none; whole blocks of `block_size` when that disagrees
// with the block count at `block_size`, counted as adjusted), its
// output_length. Requests are sorted by timestamp (stable: arrival order among
// equal ones) and numbered 1, 2, ... as the lines of the exported file are.
//
// Window: only arrivals with since_ms <= timestamp ms < until_ms are kept
// (milliseconds of the node clock, the `timestamp` the exported file holds).
//
// Memory: the kept requests (about 8 bytes per block id and 24 per request)
// plus one event at a time; the log is streamed. With max_accesses, the kept
// requests are a sample of at most that many block accesses (one branch more
// when a single branch exceeds it) and the log is read twice.
//
// Thread-safety: a plain function; the log may be a read-only open of a log a
// server is appending to (it then sees what was logged when it was opened).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "datasets/trace.h"
#include "learner/chain_sample.h"
#include "server/event_log.h"

namespace kvlearn {

struct LoggedTraceOptions {
  std::string node;  // empty: every node's arrivals
  uint32_t block_size = 512;
  int64_t since_ms = std::numeric_limits<int64_t>::min();
  int64_t until_ms = std::numeric_limits<int64_t>::max();
  std::atomic<uint64_t>* events_done = nullptr;  // when set, advanced per event scanned
  // When not 0, a first pass counts the arrivals' block accesses per branch
  // and only the branches of a ChainSample within this many accesses are kept
  // (learner/chain_sample.h: `kvlearn train`'s bound on memory).
  uint64_t max_accesses = 0;
  // When not 0, only the newest this many of the requests (the last of the
  // trace) are kept, numbered as in the whole trace; memory holds only them
  // (`kvlearn model evaluate`'s window).
  uint64_t newest_requests = 0;
};

struct LoggedTrace {
  Trace trace;
  uint64_t events = 0;                // scanned
  uint64_t other = 0;                 // not request arrivals, or of other nodes
  uint64_t outside = 0;               // arrivals kept out by the window
  uint64_t adjusted = 0;              // input_length set to whole blocks
  ChainSample sample;                 // the branches kept (all without max_accesses)
  uint64_t sampled_out = 0;           // arrivals in the window of branches not kept
  std::set<std::string> nodes;        // with arrivals kept (at most 1000 named)
  std::set<std::string> other_nodes;  // with arrivals left out by `node` (likewise)
  uint64_t first_sequence = 0;        // the log's retained range
  uint64_t next_sequence = 0;
};

// Reads the arrivals of `log`. DATA_LOSS naming the sequence number on an
// event that does not parse. NOT_FOUND, saying why, when no arrival is kept:
// an empty trace would only be refused later, far from its cause.
absl::StatusOr<LoggedTrace> ReadLoggedTrace(const EventLog& log, const LoggedTraceOptions& options);

// Opens the log in `data_dir` read-only and reads it as above, drawing
// "kvlearn COMMAND: scanned N/M events" on stderr while it reads when
// ProgressLine::Wanted(stderr, quiet) (options.events_done is then its counter),
// and noting on stderr when the requests kept come from several nodes.
absl::StatusOr<LoggedTrace> ReadLoggedTraceIn(const std::string& data_dir,
                                              LoggedTraceOptions options,
                                              const std::string& command, bool quiet);

}  // namespace kvlearn
